package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/operator/loadgen"
)

const benchPolicy = `
domain: bench
descriptors:
  - key: generic_key
    value: tiny
    rate_limit: {unit: hour, requests_per_unit: 50}
`

// benchJSON runs `ratelimitd bench ... --json` and returns its report.
func benchJSON(t *testing.T, args ...string) *loadgen.Report {
	t.Helper()
	var stdout, stderr strings.Builder
	args = append([]string{"bench", "--json", "--progress=false", "--warmup", "0s", "--duration", "30s", "--requests", "200", "--timeout", "30s"}, args...)
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("%v: exit %d\n%s", args, code, stderr.String())
	}
	var rep loadgen.Report
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, stdout.String())
	}
	c := rep.Counts
	if rep.Requests == 0 || c.Admitted+c.Denied+c.OverCapacity+c.Errors != rep.Requests {
		t.Errorf("counts %+v do not add up to %d requests", c, rep.Requests)
	}
	return &rep
}

// TestBenchFlags: what the flags say is what is sent; the daemon's policy
// admits 50 and denies the rest.
func TestBenchFlags(t *testing.T) {
	t.Parallel()
	workload := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(workload, []byte("domain: bench\ndescriptors: [{entries: [{key: generic_key, value: tiny}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"closed v1", []string{"--domain", "bench", "--descriptor", "generic_key=tiny", "-c", "2", "--conns", "1"}},
		{"closed envoy", []string{"--api", "envoy", "--domain", "bench", "--descriptor", "generic_key=tiny"}},
		{"open", []string{"--rate", "500/s", "--domain", "bench", "--descriptor", "generic_key=tiny"}},
		{"workload file", []string{"--workload", workload}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := daemontest.Start(t, benchPolicy)
			rep := benchJSON(t, append([]string{"--target", d.GRPCAddr()}, tt.args...)...)
			if rep.Requests != 200 || rep.Counts.Admitted != 50 || rep.Counts.Denied != 150 {
				t.Errorf("counts %+v of %d requests, want 50 admitted and the rest denied", rep.Counts, rep.Requests)
			}
			if strings.Join(rep.Workload, " | ") != "domain=bench | generic_key=tiny" {
				t.Errorf("workload %q", rep.Workload)
			}
		})
	}
}

// TestBenchBadFlags: a run that cannot be what the user meant is refused
// before anything is sent, with a message naming the problem.
func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "--target HOST:PORT is required"},
		{[]string{"--target", "127.0.0.1:1", "--rate", "0"}, 2, "--rate"},
		{[]string{"--target", "127.0.0.1:1", "--api", "grpc"}, 2, `api "grpc"`},
		{[]string{"--target", "127.0.0.1:1", "--descriptor", "user"}, 2, "want KEY=VALUE"},
		{[]string{"--target", "127.0.0.1:1", "--descriptor", "user={1..}"}, 2, "high end"},
		{[]string{"--target", "127.0.0.1:1", "--workload", "w.yaml", "--domain", "x"}, 2, "drop --domain"},
		{[]string{"--target", "127.0.0.1:1", "--workload", "/no/such/file.yaml"}, 2, "no such file"},
		{[]string{"--target", "127.0.0.1:1", "-c", "0"}, 2, "-c 0"},
		{[]string{"--target", "127.0.0.1:1", "--duration", "0s"}, 2, "--duration"},
		{[]string{"--target", "127.0.0.1:1", "--requests", "-1"}, 2, "--requests"},
		{[]string{"--target", "127.0.0.1:1", "--pid", "12,x"}, 2, `"x" is not a process id`},
		{[]string{"--target", "192.0.2.1:8081"}, 1, "--allow-remote"},
		{[]string{"--serve-empty", "192.0.2.1:0"}, 2, "--allow-remote"},
		{[]string{"--serve-empty", "127.0.0.1:0", "--target", "127.0.0.1:1"}, 2, "no --target"},
		{[]string{"--target", "127.0.0.1:1", "extra"}, 2, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var stderr strings.Builder
		if code := run(append([]string{"bench", "--progress=false"}, tt.args...), io.Discard, &stderr); code != tt.code {
			t.Errorf("%v: exit %d, want %d (%s)", tt.args, code, tt.code, stderr.String())
		}
		if !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: stderr %q does not say %q", tt.args, stderr.String(), tt.want)
		}
	}
}

// TestBenchServeEmpty runs the baseline server as its own process, loads
// it, with --pid, and stops it with SIGTERM.
func TestBenchServeEmpty(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "bench", "--serve-empty", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(` on (127\.0\.0\.1:\d+)$`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var target string
	select {
	case target = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("the empty server did not say where it serves")
	}
	rep := benchJSON(t, "--target", target, "--pid", strconv.Itoa(cmd.Process.Pid))
	if rep.Counts.Admitted != rep.Requests {
		t.Errorf("admitted %d of %d", rep.Counts.Admitted, rep.Requests)
	}
	if len(rep.Servers) != 1 || rep.Servers[0].PID != cmd.Process.Pid || rep.Servers[0].RSSBytes == 0 {
		t.Errorf("server stats %+v", rep.Servers)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}

// TestBenchDocsListEveryFlag keeps docs/operations.md true to bench --help.
func TestBenchDocsListEveryFlag(t *testing.T) {
	t.Parallel()
	docs, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range helpFlags(t, 20, "bench") {
		name := "--" + f
		if len(f) == 1 {
			name = "-" + f
		}
		if !regexp.MustCompile(regexp.QuoteMeta(name) + `\b`).Match(docs) {
			t.Errorf("docs/operations.md does not mention %s", name)
		}
	}
}
