package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// buildDir holds the programs the tests build, removed by TestMain.
var buildDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "ratelimitd-test-") })

// build builds the package pkg (without the race detector, whatever the
// tests run under) into buildDir as name, and returns its path.
func build(name, pkg string) (string, error) {
	dir, err := buildDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", errors.New("go build " + pkg + ": " + err.Error() + "\n" + string(out))
	}
	return bin, nil
}

// binary builds ratelimitd once.
var binary = sync.OnceValues(func() (string, error) { return build("ratelimitd", ".") })

// floodClient builds internal/testkit/keyflood's floodclient once.
var floodClient = sync.OnceValues(func() (string, error) {
	return build("floodclient", "github.com/ratelimitd/ratelimitd/internal/testkit/keyflood/floodclient")
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := buildDir(); err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// process is a running ratelimitd.
type process struct {
	cmd        *exec.Cmd
	grpc, http string
	logs       *logtest.Buffer
	exited     chan struct{}
	exitErr    error
}

var serving = regexp.MustCompile(`msg="ratelimitd serving" grpc=(\S+) http=(\S+)`)

// startProcess runs the built daemon on free loopback ports and waits for
// its "serving" log line, which names the bound addresses.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	return startProcessIn(t, "", args...)
}

// startProcessIn is startProcess in the working directory dir.
func startProcessIn(t *testing.T, dir string, args ...string) *process {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, args...)
	p := &process{cmd: exec.Command(bin, args...), logs: &logtest.Buffer{}, exited: make(chan struct{})}
	p.cmd.Dir = dir
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("daemon logs:\n%s", p.logs)
		}
	})
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.logs.Write([]byte(line + "\n"))
			if m := serving.FindStringSubmatch(line); m != nil {
				addrs <- m[1:]
			}
		}
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case a := <-addrs:
		p.grpc, p.http = a[0], a[1]
	case <-p.exited:
		t.Fatalf("ratelimitd exited before serving: %v\n%s", p.exitErr, p.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("ratelimitd did not report serving:\n%s", p.logs)
	}
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("ratelimitd did not exit")
	}
	var exit *exec.ExitError
	if errors.As(p.exitErr, &exit) {
		return exit.ExitCode()
	}
	if p.exitErr != nil {
		t.Fatal(p.exitErr)
	}
	return 0
}

// TestSIGTERMFinishesCallsInFlight keeps calls flowing from several
// goroutines, sends SIGTERM, and checks that every call either got its
// decision or was refused cleanly (Unavailable), that the daemon cut
// nothing off, and that it exits 0.
func TestSIGTERMFinishesCallsInFlight(t *testing.T) {
	t.Parallel()
	p := startProcess(t, "--shutdown-grace", "30s")
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rl.NewRateLimitServiceClient(conn)

	const callers = 8
	var decided, refused atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unexpected []error
	stop := time.Now().Add(60 * time.Second) // a bound; the daemon's exit ends the loop long before
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &rl.ShouldRateLimitRequest{Domain: "default", Descriptors: []*rl.Descriptor{
				{Entries: []*rl.Entry{{Key: "generic_key", Value: "global"}}},
				{Entries: []*rl.Entry{{Key: "path", Value: "/orders"}, {Key: "user", Value: "u" + strconv.Itoa(i)}}},
			}}
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := client.ShouldRateLimit(ctx, r)
				cancel()
				switch {
				case err == nil && len(resp.Statuses) == 2:
					decided.Add(1)
				case status.Code(err) == codes.Unavailable:
					refused.Add(1)
					return // the daemon is going or gone
				default:
					mu.Lock()
					unexpected = append(unexpected, errors.Join(err, errors.New(resp.String())))
					mu.Unlock()
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for decided.Load() < 500 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t)
	wg.Wait()

	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	if len(unexpected) > 0 {
		t.Errorf("calls that neither got a decision nor were refused: %v", unexpected)
	}
	if decided.Load() < 500 || refused.Load() != callers {
		t.Errorf("%d decided, %d refused; want at least 500 decided and each of the %d callers refused once the daemon left", decided.Load(), refused.Load(), callers)
	}
	logs := p.logs.String()
	if strings.Contains(logs, "cutting off") || !strings.Contains(logs, `msg=stopped`) {
		t.Errorf("the daemon did not drain cleanly:\n%s", logs)
	}
}

// TestSIGHUPReloads: SIGHUP reloads the policy even when nothing changed
// (the file watcher only reacts to changes).
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(path, []byte("domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "--config", path)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a reload logged after SIGHUP", func() bool { return strings.Contains(p.logs.String(), `msg="policy reloaded"`) })
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ratelimitd_policy_reloads_total{result=\"success\"} 1\n") {
		t.Errorf("reload not counted:\n%s", body)
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t); code != 0 {
		t.Errorf("exit status %d after SIGINT, want 0", code)
	}
}

// helpFlags returns the names of the flags that `ratelimitd ARGS --help`
// lists, failing the test if it lists fewer than atLeast.
func helpFlags(t *testing.T, atLeast int, args ...string) []string {
	t.Helper()
	var help bytes.Buffer
	if code := run(append(args, "--help"), io.Discard, &help); code != 0 {
		t.Fatalf("%v --help exited %d", args, code)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(help.String(), -1) {
		names = append(names, m[1])
	}
	if len(names) < atLeast {
		t.Fatalf("found only %d flags in %v --help:\n%s", len(names), args, help.String())
	}
	return names
}

// TestREADMEListsEveryFlag keeps the README's flag list true to --help.
func TestREADMEListsEveryFlag(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range helpFlags(t, 10) {
		if !strings.Contains(string(readme), "`--"+f) {
			t.Errorf("README.md does not mention --%s", f)
		}
	}
}

// TestBadFlags: a flag value the daemon cannot use is refused before
// anything starts, with exit status 2 and a message naming the flag.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--near-limit-ratio", "0"}, "--near-limit-ratio"},
		{[]string{"--max-detailed-series", "0"}, "--max-detailed-series 0: want at least 1"},
		{[]string{"--max-policy-bytes", "0"}, "--max-policy-bytes 0: want at least 1"},
		{[]string{"--max-policy-descriptors", "-1"}, "--max-policy-descriptors -1: want at least 1"},
		{[]string{"check-config", "--max-policy-bytes", "0", "p.yaml"}, "--max-policy-bytes 0: want at least 1"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--max-memory", "256M"}, "--max-memory \"256M\""}, // M alone: neither MB nor Mi
		{[]string{"--max-memory", "0"}, "max-memory"},
		{[]string{"serve"}, `unexpected argument "serve"`},
		{[]string{"--snapshot-interval", "0s"}, "--snapshot-interval"},
		{[]string{"--max-connections", "0"}, "--max-connections 0: want at least 1"},
		{[]string{"--grpc-max-streams", "0"}, "grpc-max-streams"},
		{[]string{"--grpc-max-waiting", "-1"}, "--grpc-max-waiting -1: want at least 1"},
		{[]string{"--grpc-max-long-streams", "0"}, "--grpc-max-long-streams 0: want at least 1"},
		{[]string{"--grpc-max-long-streams-per-caller", "0"}, "--grpc-max-long-streams-per-caller 0: want at least 1"},
		{[]string{"--grpc-max-long-streams-per-conn", "-1"}, "--grpc-max-long-streams-per-conn -1: want at least 1"},
		{[]string{"--message-timeout", "0s"}, "--message-timeout 0s: want a positive duration"},
		{[]string{"--idle-timeout", "-1s"}, "--idle-timeout -1s: want a positive duration"},
		{[]string{"--max-header-bytes", "0"}, "max-header-bytes"},
		{[]string{"--grpc-paced-read-rate", "0"}, "grpc-paced-read-rate"},
		{[]string{"--xds-tls"}, "give --xds-server"},
		{[]string{"--xds-server", "127.0.0.1:1", "--xds-headers", "no-colon"}, `--xds-headers: "no-colon" is not key:value`},
		{[]string{"--xds-server", "127.0.0.1:1", "--xds-tls-ca", "/no/such/ca.pem"}, "xds server CA"},
		{[]string{"--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--log-format", "xml"}, `--log-format "xml"`},
	}
	for _, tt := range tests {
		var stderr strings.Builder
		if code := run(tt.args, io.Discard, &stderr); code != 2 {
			t.Errorf("%v: exit status %d, want 2", tt.args, code)
		}
		if !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: stderr %q does not mention %q", tt.args, stderr.String(), tt.want)
		}
	}
}

// TestSecondSignalCutsDrainShort: with an hour of --shutdown-delay, the
// first SIGTERM starts draining and a second one ends it: the daemon exits
// 0 instead of waiting out the delay.
func TestSecondSignalCutsDrainShort(t *testing.T) {
	t.Parallel()
	p := startProcess(t, "--shutdown-delay", "1h")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a drain logged after SIGTERM", func() bool { return strings.Contains(p.logs.String(), "draining") })
	select {
	case <-p.exited:
		t.Fatal("exited during the hour of --shutdown-delay after one signal")
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("exit status %d after the second SIGTERM, want 0", code)
	}
}

// TestBadAuthzPolicy: the daemon does not start on an authorization policy
// it cannot use; it exits 1 saying where the problem is.
func TestBadAuthzPolicy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "authz.yaml")
	if err := os.WriteFile(path, []byte("clients:\n  - name: shop\n    match: [{common_name: shop}]\n    grants: [{domains: [shop], access: write}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	if code := run([]string{"--authz-policy", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, io.Discard, &stderr); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if want := path + `:4: clients[0].grants[0].access: "write": want check (or peek), charge or refund, or a list of them`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not say %q", stderr.String(), want)
	}
}

// TestPprofOffByDefault: a daemon started with default flags serves no
// profiles; with --pprof it does, but never its command line, which may
// hold what the operator did not mean to publish.
func TestPprofOffByDefault(t *testing.T) {
	t.Parallel()
	get := func(p *process, path string) (int, string) {
		resp, err := http.Get("http://" + p.http + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get(startProcess(t), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("default flags: /debug/pprof/ %d, want 404", code)
	}
	p := startProcess(t, "--pprof", "--max-value-bytes", "777")
	if code, _ := get(p, "/debug/pprof/heap?debug=1"); code != http.StatusOK {
		t.Errorf("--pprof: heap profile %d, want 200", code)
	}
	if code, body := get(p, "/debug/pprof/cmdline"); code != http.StatusNotFound || strings.Contains(body, "777") {
		t.Errorf("--pprof: /debug/pprof/cmdline %d %q, want 404 without the command line", code, body)
	}
}

// TestCheckConfigLimits: check-config applies the policy bounds as the
// daemon does, and warns of a domain that admits everything.
func TestCheckConfigLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("domain: big\ndescriptors:\n"+strings.Repeat("#", 3000)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open.yaml")
	if err := os.WriteFile(open, []byte("domain: open\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unlimited := filepath.Join(dir, "unlimited.yaml")
	if err := os.WriteFile(unlimited, []byte("domain: free\ndescriptors:\n  - {key: user, rate_limit: {unlimited: true}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	budget := filepath.Join(dir, "ai.yaml")
	if err := os.WriteFile(budget, []byte("domain: ai\ndescriptors:\n  - {key: tenant, rate_limit: {unit: hour, requests_per_unit: 1000, overdraft: true}}\n  - {key: user, rate_limit: {unit: hour, requests_per_unit: 10}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"check-config", budget}, 0, "ok: domain \"ai\" from " + budget + "\noverdraft: ai.tenant takes charges in full, into debt if need be\n", ""},
		{[]string{"check-config", "--max-policy-bytes", "1000", big}, 1, "", big + ": 3026 bytes, more than the limit of 1000 (--max-policy-bytes); not parsed\n"},
		{[]string{"check-config", open}, 0, "ok: domain \"open\" from " + open + "\nwarning: domain \"open\" has no rate limits: it admits every request\n", ""},
		{[]string{"check-config", unlimited}, 0, "ok: domain \"free\" from " + unlimited + "\nwarning: domain \"free\" has no rate limits: it admits every request\n", ""},
		{[]string{"check-config"}, 2, "", "usage: ratelimitd check-config"},
	}
	for _, tt := range tests {
		var stdout, stderr strings.Builder
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code || stdout.String() != tt.stdout || !strings.HasPrefix(stderr.String(), tt.stderr) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
	}
}
