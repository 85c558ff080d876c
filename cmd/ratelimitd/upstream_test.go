package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/observe/tracing/otlptest"
)

// TestUpstreamEnvFileConfigAndFlagsWin: under upstream's environment
// (--upstream-env), the policy is read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config
// and the command line wins over the environment: PORT and GRPC_PORT
// name ports that cannot be bound, BACKEND_TYPE says Redis, and the flags
// of startProcess and --store memory decide.
func TestUpstreamEnvFileConfigAndFlagsWin(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte("domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false", "LOG_LEVEL": "info",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "PORT": "1", "GRPC_PORT": "1", "TRACING_ENABLED": "true",
	} {
		t.Setenv(k, v)
	}
	p := startProcess(t, "--upstream-env", "--store", "memory")
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rl.NewRateLimitServiceClient(conn)
	var got []string
	for range 2 {
		resp, err := c.ShouldRateLimit(context.Background(), &rl.ShouldRateLimitRequest{Domain: "shop", Descriptors: []*rl.Descriptor{{Entries: []*rl.Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.OverallCode.String())
	}
	if strings.Join(got, " ") != "CODE_OK CODE_OVER_LIMIT" {
		t.Errorf("decisions %v, want the file's 1 an hour", got)
	}
}

// TestUpstreamEnvTracing: upstream's TRACING_* and OTEL_EXPORTER_OTLP_ENDPOINT
// send a span per decision to the collector over the protocol named, with
// the service name given, child of the caller's traceparent.
func TestUpstreamEnvTracing(t *testing.T) {
	col := otlptest.Start(t)
	for k, v := range map[string]string{
		"USE_STATSD": "false", "LOG_LEVEL": "info", "BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "RateLimit",
		"TRACING_SAMPLING_RATE": "0.5", "OTEL_EXPORTER_OTLP_ENDPOINT": col.GRPCURL, "OTEL_BSP_SCHEDULE_DELAY": "50",
	} {
		t.Setenv(k, v)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("domain: default\ndescriptors:\n  - key: generic_key\n    rate_limit: {unit: hour, requests_per_unit: 9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := tracedDecision(t, startProcess(t, "--upstream-env", "--store", "memory", "--config", policy), col)
	if s.ParentSpanID != "00f067aa0ba902b7" || s.Resource["service.name"] != "RateLimit" || s.Attributes["ratelimit.domain"] != "default" {
		t.Errorf("span %+v; want a child of the caller's span, service RateLimit, domain default", s)
	}
}

// TestRatelimitNameReadsUpstreamEnv: started as ratelimit, the binary reads
// upstream's environment; an environment it refuses stops it with status
// 2 and the variable named, but --version still answers.
func TestRatelimitNameReadsUpstreamEnv(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Link(bin, ratelimit); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ratelimit)
	cmd.Env = []string{"MERGE_DOMAIN_CONFIG=true", "REDIS_SOCKET_TYPE=tcp"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "MERGE_DOMAIN_CONFIG=true") {
		t.Errorf("ratelimit with MERGE_DOMAIN_CONFIG=true: %v\n%s\nwant exit 2 naming it", err, out)
	}
	cmd = exec.Command(ratelimit, "--version")
	cmd.Env = []string{} // upstream's defaults: refused (a Redis unix socket), yet --version answers
	if out, err := cmd.Output(); err != nil || !strings.HasPrefix(string(out), "ratelimitd ") {
		t.Errorf("ratelimit --version: %v %q", err, out)
	}
}

// TestUpstreamEnvRefusesWhatFlagsRefuse: a variable of upstream's
// environment whose flag refuses its value is refused, naming the variable
// and the flag, for the very reason the flag gives on the command line:
// applyUpstreamEnv sets the flag, and the flag's one check decides both.
// Every run is given a stray argument, so that one whose flags pass exits
// at it (2, "unexpected argument") rather than serving.
func TestUpstreamEnvRefusesWhatFlagsRefuse(t *testing.T) {
	const positive = "want a positive duration"
	const bytes = "want a whole number of bytes from 0 (gRPC's default, 4 MiB) to 67108864 (64 MiB)"
	for _, tt := range []struct {
		variable, value, flag, reason string
		xds                           bool
	}{
		{"REDIS_TIMEOUT", "0s", "redis-timeout", positive, false},
		{"REDIS_TIMEOUT", "-10s", "redis-timeout", positive, false},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "0s", "xds-backoff-initial", positive, true},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "-3s", "xds-backoff-initial", positive, true},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "0s", "xds-backoff-max", positive, true},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "-1m0s", "xds-backoff-max", positive, true},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "100000000000000", "xds-max-message-bytes", bytes, true},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "67108865", "xds-max-message-bytes", bytes, true},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1", "xds-max-message-bytes", bytes, true},
	} {
		t.Run(tt.variable+"="+tt.value, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := run([]string{"--" + tt.flag, tt.value, "stray"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.reason) {
				t.Fatalf("--%s %s: exit %d, %s; want 2 and %q", tt.flag, tt.value, code, stderr.String(), tt.reason)
			}
			t.Setenv("REDIS_SOCKET_TYPE", "tcp")
			t.Setenv("REDIS_URL", "127.0.0.1:1")
			t.Setenv("USE_STATSD", "false")
			if tt.xds {
				t.Setenv("CONFIG_TYPE", "GRPC_XDS_SOTW")
			}
			t.Setenv(tt.variable, tt.value)
			stderr.Reset()
			want := "ratelimitd: envoyproxy/ratelimit's environment: " + tt.variable + ": --" + tt.flag + "=" + tt.value + ": " + tt.reason + "\n"
			if code := run([]string{"--upstream-env", "stray"}, &stdout, &stderr); code != 2 || stderr.String() != want {
				t.Errorf("%s=%s: exit %d, stderr:\n%s\nwant exit 2 and\n%s", tt.variable, tt.value, code, stderr.String(), want)
			}
		})
	}
}

// TestRatelimitNameIgnoresUnknownArgs: started as ratelimit with Envoy AI
// Gateway's argument (and others upstream would ignore), the binary
// starts, reads the flags it knows, and names what it ignored in one
// warning, without the ignored values.
func TestRatelimitNameIgnoresUnknownArgs(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ratelimit := filepath.Join(dir, "ratelimit")
	if err := os.Link(bin, ratelimit); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "runtime", "config")
	if err := os.MkdirAll(policy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policy, "shop.yaml"), []byte("domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ratelimit, "--quotaRateLimitServiceAddr=ai-gateway-secret:1063", "--grpc-addr", "127.0.0.1:0",
		"-v", "--http-addr=127.0.0.1:0", "--store", "memory", "extra")
	cmd.Env = []string{"RUNTIME_ROOT=" + dir, "RUNTIME_SUBDIRECTORY=runtime", "USE_STATSD=false", "LOG_LEVEL=info", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:1"}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(stderr); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	var logs, warnings []string
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break wait
			}
			logs = append(logs, line)
			if strings.Contains(line, "command-line arguments ignored") {
				warnings = append(warnings, line)
			}
			if serving.MatchString(line) {
				break wait
			}
		case <-deadline:
			break wait
		}
	}
	all := strings.Join(logs, "\n")
	if !serving.MatchString(all) {
		t.Fatalf("ratelimit with AI Gateway's argument did not start:\n%s", all)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "--quotaRateLimitServiceAddr, -v, 1 other argument") {
		t.Errorf("warnings %q, want one naming --quotaRateLimitServiceAddr, -v and 1 other argument", warnings)
	}
	if strings.Contains(all, "ai-gateway-secret") {
		t.Errorf("an ignored argument's value is in the logs:\n%s", all)
	}
}

func TestUpstreamArgs(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("grpc-addr", "", "")
	fs.Bool("pprof", false, "")
	for _, tc := range []struct {
		args          []string
		kept, ignored string
	}{
		{[]string{"--quotaRateLimitServiceAddr=x:1"}, "", "--quotaRateLimitServiceAddr"},
		{[]string{"--grpc-addr", "a:1", "--pprof", "--other", "v"}, "--grpc-addr a:1 --pprof", "--other, 1 other argument"},
		{[]string{"-grpc-addr=a:1", "-pprof=false", "pos1", "pos2"}, "-grpc-addr=a:1 -pprof=false", "2 other arguments"},
		{[]string{"--help"}, "--help", ""},
		{[]string{"--pprof", "--", "--grpc-addr", "a:1"}, "--pprof", "2 other arguments"},
		{[]string{"-", "--grpc-addr"}, "--grpc-addr", "1 other argument"},
	} {
		kept, ignored := upstreamArgs(fs, tc.args)
		if strings.Join(kept, " ") != tc.kept || strings.Join(ignored, ", ") != tc.ignored {
			t.Errorf("upstreamArgs(%q) = %q, %q; want %q, %q", tc.args, kept, ignored, tc.kept, tc.ignored)
		}
	}
}

// TestUpstreamEnvMissingPolicyDir: upstream's environment naming a policy
// directory that does not exist is refused naming the variables it is
// joined from, their values and upstream's defaults; a --config on the
// command line wins over them.
func TestUpstreamEnvMissingPolicyDir(t *testing.T) {
	t.Setenv("REDIS_SOCKET_TYPE", "tcp")
	t.Setenv("REDIS_URL", "127.0.0.1:1")
	t.Setenv("USE_STATSD", "false")
	root := filepath.Join(t.TempDir(), "nope")
	t.Setenv("RUNTIME_ROOT", root)
	t.Setenv("RUNTIME_SUBDIRECTORY", "ratelimit")
	var stdout, stderr strings.Builder
	want := "ratelimitd: envoyproxy/ratelimit's environment: the policy directory " + filepath.Join(root, "ratelimit", "config") +
		` does not exist; it is joined from RUNTIME_ROOT="` + root + `", RUNTIME_SUBDIRECTORY="ratelimit", RUNTIME_APPDIRECTORY unset (upstream's default "config")` + "\n"
	if code := run([]string{"--upstream-env"}, &stdout, &stderr); code != 2 || stderr.String() != want {
		t.Errorf("exit %d, stderr:\n%s\nwant 2 and\n%s", code, stderr.String(), want)
	}
	stderr.Reset()
	if code := run([]string{"--upstream-env", "--config", "p.yaml", "stray"}, &stdout, &stderr); code != 2 || strings.Contains(stderr.String(), "RUNTIME_ROOT") {
		t.Errorf("with --config: exit %d, stderr %s; want the command line's --config to win", code, stderr.String())
	}
}
