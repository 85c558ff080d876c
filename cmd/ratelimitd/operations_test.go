package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/observe/tracing/otlptest"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// operationsSnippets returns the commands of the sh blocks in
// docs/operations.md's section titled section: each an environment
// (VAR=value words before the command) and the command's words.
func operationsSnippets(t *testing.T, section string) (cmds [][2][]string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n"+section+"\n")
	if start < 0 {
		t.Fatalf("docs/operations.md has no %q", section)
	}
	doc = doc[start+len(section)+2:]
	if end := strings.Index(doc, "\n## "); end >= 0 {
		doc = doc[:end]
	}
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		var env, words []string
		for _, w := range strings.Fields(strings.ReplaceAll(m[1], "\\\n", " ")) {
			if len(words) == 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(w) {
				env = append(env, w)
			} else {
				words = append(words, w)
			}
		}
		cmds = append(cmds, [2][]string{env, words})
	}
	return cmds
}

// TestOperationsLogsAndTraces runs docs/operations.md's commands of "Logs
// and traces" with the built binary (on free ports, the collector's
// address replaced by an in-process OTLP receiver's): JSON logs at debug
// level, and traces switched on by the environment and by the flags, each
// exporting the span of a decision.
func TestOperationsLogsAndTraces(t *testing.T) {
	cmds := operationsSnippets(t, "## Logs and traces")
	if len(cmds) != 3 {
		t.Fatalf("%d commands in Logs and traces, want 3 (logs, traces by environment, traces by flags)", len(cmds))
	}
	for _, c := range cmds {
		if c[1][0] != "ratelimitd" {
			t.Fatalf("command %v: not ratelimitd", c[1])
		}
	}

	// JSON logs, at debug level: the first lines parse, and the serving
	// line is among them.
	t.Run("logs", func(t *testing.T) {
		bin, err := binary()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, append(cmds[0][1][1:], "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")...)
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
			}
			if line["msg"] == "ratelimitd serving" {
				return
			}
		}
		t.Fatal("no serving line")
	})

	for i, name := range map[int]string{1: "environment", 2: "flags"} {
		t.Run(name, func(t *testing.T) {
			col := otlptest.Start(t)
			replace := strings.NewReplacer("http://localhost:4318", col.HTTPURL, "http://localhost:4317", col.GRPCURL)
			service := "ratelimitd"
			for _, kv := range cmds[i][0] {
				k, v, _ := strings.Cut(replace.Replace(kv), "=")
				t.Setenv(k, v)
				if k == "OTEL_SERVICE_NAME" {
					service = v
				}
			}
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // not to wait 5s for the batch
			var args []string
			for _, a := range cmds[i][1][1:] {
				args = append(args, replace.Replace(a))
			}
			s := tracedDecision(t, startProcess(t, args...), col)
			if s.ParentSpanID != "00f067aa0ba902b7" || s.Resource["service.name"] != service || s.Attributes["ratelimit.rule"] != "default.generic_key_global" {
				t.Errorf("span %+v; want a child of the caller's, service %s, rule default.generic_key_global", s, service)
			}
		})
	}
}

// TestOperationsSentinel runs docs/operations.md's Redis Sentinel command
// with the built binary, its sentinels' addresses replaced by three real
// sentinels': the decision is charged on their master.
func TestOperationsSentinel(t *testing.T) {
	cmds := operationsSnippets(t, "## Redis Sentinel")
	if len(cmds) != 1 || cmds[0][1][0] != "ratelimitd" {
		t.Fatalf("commands %v, want one ratelimitd", cmds)
	}
	sn := redistest.StartSentinels(t)
	args := cmds[0][1][1:]
	for i := range args {
		if i > 0 && args[i-1] == "--redis-addr" {
			args[i] = sn.Addrs()
		}
		if i > 0 && args[i-1] == "--redis-sentinel" && args[i] != redistest.SentinelMaster {
			t.Fatalf("the command names the master %s; the test's sentinels know %s", args[i], redistest.SentinelMaster)
		}
	}
	p := startProcess(t, args...)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := rl.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rl.ShouldRateLimitRequest{Domain: "default", Descriptors: []*rl.Descriptor{{Entries: []*rl.Entry{{Key: "generic_key", Value: "global"}}}}})
	if err != nil || r.OverallCode != rl.Code_CODE_OK {
		t.Fatalf("%v, %v; want admitted", r, err)
	}
	if keys := sn.Master.Cli(t, "DBSIZE"); strings.TrimSpace(keys) == "0" {
		t.Error("nothing charged on the sentinels' master")
	}
	if !strings.Contains(p.logs.String(), "store=\"redis sentinel master mymaster\"") {
		t.Errorf("the start line does not name the sentinel master:\n%s", p.logs)
	}
}

// tracedDecision asks p for a decision of the default policy's global
// bucket, as a caller whose traceparent says its trace is sampled (a
// parent-based sampler follows it, whatever its ratio), and returns the
// span col receives in that trace.
func tracedDecision(t *testing.T, p *process, col *otlptest.Receiver) otlptest.Span {
	t.Helper()
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := rl.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rl.ShouldRateLimitRequest{Domain: "default", Descriptors: []*rl.Descriptor{{Entries: []*rl.Entry{{Key: "generic_key", Value: "global"}}}}}); err != nil {
		t.Fatal(err)
	}
	return col.WaitFor(t, trace, 1)[0]
}
