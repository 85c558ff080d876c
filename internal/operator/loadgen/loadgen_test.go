package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics/metricstest"
	"github.com/ratelimitd/ratelimitd/internal/operator/loadgen"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig/tlstest"
)

// policy has limits small enough to be reached in a short run. The
// daemon's clock is fake and stands still, so nothing refills: a limit of
// N admits exactly N requests over any run.
const policy = `
domain: bench
descriptors:
  - key: generic_key
    value: tiny
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: big
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 5}
`

func workload(t *testing.T, hits uint32, descriptors ...string) *loadgen.Workload {
	t.Helper()
	w := &loadgen.Workload{Domain: "bench", Hits: hits}
	for _, s := range descriptors {
		d, err := loadgen.ParseDescriptor(s)
		if err != nil {
			t.Fatal(err)
		}
		w.Descriptors = append(w.Descriptors, d)
	}
	return w
}

// run runs cfg against d and checks what holds for every report: each
// request counted once. Unless cfg says otherwise, the run is 200
// requests, however long they take (up to 30s), and no request times out
// on a busy machine.
func run(t *testing.T, d *daemontest.Daemon, cfg loadgen.Config) *loadgen.Report {
	t.Helper()
	cfg.Target = d.GRPCAddr()
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Duration == 0 && cfg.MaxRequests == 0 {
		cfg.Duration, cfg.MaxRequests = 30*time.Second, 200
	}
	rep, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, rep)
	return rep
}

func checkSums(t *testing.T, rep *loadgen.Report) {
	t.Helper()
	c := rep.Counts
	if sum := c.Admitted + c.Denied + c.OverCapacity + c.Errors; sum != rep.Requests {
		t.Errorf("admitted %d + denied %d + over capacity %d + errors %d = %d, want requests %d",
			c.Admitted, c.Denied, c.OverCapacity, c.Errors, sum, rep.Requests)
	}
	if rep.Requests == 0 {
		t.Fatal("no request was sent")
	}
	r := rep.Ratios
	if got := r.Admitted + r.Denied + r.OverCapacity + r.Errors; got < 0.999999 || got > 1.000001 {
		t.Errorf("ratios add up to %v, want 1", got)
	}
	l := rep.LatencyUS
	if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max*1.001+1) {
		t.Errorf("latency percentiles out of order: %+v", l)
	}
}

// decisions returns the daemon's count of requests decided, by overall
// code ("ok", "over_limit"), from its /metrics.
func decisions(t *testing.T, d *daemontest.Daemon) (ok, overLimit int64) {
	t.Helper()
	resp, err := http.Get("http://" + d.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := metricstest.Samples(t, resp.Body)
	return int64(s[`ratelimitd_decisions_total{code="ok"}`]), int64(s[`ratelimitd_decisions_total{code="over_limit"}`])
}

// TestDecisionsWhereThePolicySays runs each workload against a fresh daemon
// and checks the counts against what the policy allows, and against what
// the daemon itself counted.
func TestDecisionsWhereThePolicySays(t *testing.T) {
	tests := []struct {
		name        string
		api         loadgen.API
		w           func(t *testing.T) *loadgen.Workload
		open        bool
		admitted    int64 // exact
		overCap     bool  // every request over capacity
		mostlyDeny  bool
		warmupSpent bool // the warmup takes the whole allowance
	}{
		{name: "fixed key: its limit is admitted, the rest denied",
			w: func(t *testing.T) *loadgen.Workload { return workload(t, 0, "generic_key=tiny") }, admitted: 50},
		{name: "envoy API",
			api: loadgen.APIEnvoy,
			w:   func(t *testing.T) *loadgen.Workload { return workload(t, 0, "generic_key=tiny") }, admitted: 50},
		{name: "key space: one per user of 20",
			w: func(t *testing.T) *loadgen.Workload { return workload(t, 0, "user=u{1..20}") }, admitted: 20},
		{name: "zipf key space: one per user of 10",
			w: func(t *testing.T) *loadgen.Workload { return workload(t, 0, "user=u{1..10:zipf=1.2}") }, admitted: 10},
		{name: "two descriptors, all or nothing: the user limit decides",
			w: func(t *testing.T) *loadgen.Workload { return workload(t, 0, "generic_key=tiny", "user=u{1..20}") }, admitted: 20},
		{name: "hits: 10 a request on a limit of 50",
			w: func(t *testing.T) *loadgen.Workload { return workload(t, 10, "generic_key=tiny") }, admitted: 5},
		{name: "hits beyond the capacity are over capacity",
			w: func(t *testing.T) *loadgen.Workload { return workload(t, 6, "big=x") }, overCap: true},
		{name: "open loop",
			open: true,
			w:    func(t *testing.T) *loadgen.Workload { return workload(t, 0, "generic_key=tiny") }, admitted: 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := daemontest.Start(t, policy)
			cfg := loadgen.Config{API: tt.api, Workload: tt.w(t), Callers: 4, Conns: 2}
			if tt.open {
				cfg.Rate = 400
			}
			rep := run(t, d, cfg)
			c := rep.Counts
			if c.Errors != 0 {
				t.Errorf("%d errors: %+v", c.Errors, rep.Errors)
			}
			if tt.overCap {
				if c.OverCapacity != rep.Requests {
					t.Errorf("over capacity %d of %d requests, want all", c.OverCapacity, rep.Requests)
				}
			} else if c.Admitted != tt.admitted {
				t.Errorf("admitted %d, want %d (requests %d)", c.Admitted, tt.admitted, rep.Requests)
			}
			if rep.Requests != 200 {
				t.Errorf("%d requests, want the 200 asked for", rep.Requests)
			}
			// Without a warmup, the daemon decided exactly what was counted.
			ok, over := decisions(t, d)
			if ok != c.Admitted || over != c.Denied+c.OverCapacity {
				t.Errorf("daemon decided %d ok and %d over limit; the report says %d admitted, %d denied, %d over capacity",
					ok, over, c.Admitted, c.Denied, c.OverCapacity)
			}
		})
	}
}

// TestWarmupIsNotCounted: requests sent in the warmup reach the daemon but
// not the report. The daemon admits 50 in all; the warmup's w requests
// took min(w, 50) of them, so the report's 200 requests hold 50 - w
// admissions (or none).
func TestWarmupIsNotCounted(t *testing.T) {
	d := daemontest.Start(t, policy)
	rep := run(t, d, loadgen.Config{Workload: workload(t, 0, "generic_key=tiny"), Callers: 2, Warmup: 200 * time.Millisecond, Duration: 30 * time.Second, MaxRequests: 200})
	ok, over := decisions(t, d)
	if ok != 50 {
		t.Fatalf("the daemon admitted %d, want 50", ok)
	}
	warmup := ok + over - rep.Requests
	if warmup <= 0 {
		t.Fatalf("the daemon decided %d requests, the report counts %d: none in the warmup", ok+over, rep.Requests)
	}
	if want := max(0, 50-warmup); rep.Counts.Admitted != want || rep.Counts.Denied != rep.Requests-want {
		t.Errorf("after %d warmup requests: counts %+v of %d, want %d admitted and the rest denied", warmup, rep.Counts, rep.Requests, want)
	}
}

// TestOpenLoopKeepsItsSchedule: an open loop sends rate × duration
// requests in the window, however fast the answers come.
func TestOpenLoopKeepsItsSchedule(t *testing.T) {
	d := daemontest.Start(t, policy)
	rep := run(t, d, loadgen.Config{Workload: workload(t, 0, "user=u{1..1000}"), Rate: 400, Duration: 500 * time.Millisecond, Warmup: 250 * time.Millisecond})
	if rep.Requests != 200 {
		t.Errorf("%d requests in 500ms at 400/s, want 200", rep.Requests)
	}
	if rep.RequestsPerSecond != 400 {
		t.Errorf("%v requests/s, want 400", rep.RequestsPerSecond)
	}
	if rep.Mode != "open" || rep.TargetRate != 400 {
		t.Errorf("mode %q at %v/s, want open at 400/s", rep.Mode, rep.TargetRate)
	}
}

// slowServer answers after a fixed delay.
type slowServer struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
	delay time.Duration
}

func (s slowServer) ShouldRateLimit(context.Context, *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	time.Sleep(s.delay)
	return &ratelimitv1.ShouldRateLimitResponse{OverallCode: ratelimitv1.Code_CODE_OK}, nil
}

func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// TestOpenLoopCountsQueueing: a server that takes 20ms a request, one at a
// time, asked for one every 10ms, falls behind by 10ms a request. The
// open loop's latencies, measured from when each request was due, show
// that queue: the k-th answer cannot come before (k+1)×20ms, so its latency
// is at least 20+10k ms, and the median of 50 is at least 260ms. A tool
// that timed from the actual send would report 20ms throughout.
func TestOpenLoopCountsQueueing(t *testing.T) {
	addr := serve(t, func(g *grpc.Server) {
		ratelimitv1.RegisterRateLimitServiceServer(g, slowServer{delay: 20 * time.Millisecond})
	})
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		Target: addr, Workload: workload(t, 0, "k=v"), Rate: 100, MaxInFlight: 1, Conns: 1,
		Duration: 500 * time.Millisecond, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, rep)
	if rep.Requests != 50 || rep.Counts.Admitted != 50 {
		t.Fatalf("requests %d, admitted %d, want 50 and 50", rep.Requests, rep.Counts.Admitted)
	}
	if rep.LatencyUS.P50 < 250_000 || rep.LatencyUS.Max < 500_000 {
		t.Errorf("p50 %vµs, max %vµs: want at least 250ms and 500ms (the queue)", rep.LatencyUS.P50, rep.LatencyUS.Max)
	}
	if rep.Client.LateSends == 0 {
		t.Error("no late sends reported, though the server kept up with half the rate")
	}
}

// TestEmptyServerAdmitsEverything: the baseline answers OK to both APIs.
func TestEmptyServerAdmitsEverything(t *testing.T) {
	addr := serve(t, func(g *grpc.Server) { loadgen.RegisterEmpty(g) })
	for _, api := range []loadgen.API{loadgen.APIv1, loadgen.APIEnvoy} {
		rep, err := loadgen.Run(context.Background(), loadgen.Config{
			Target: addr, API: api, Workload: workload(t, 0, "generic_key=tiny"), Callers: 2, Duration: 30 * time.Second, MaxRequests: 100,
		})
		if err != nil {
			t.Fatal(err)
		}
		checkSums(t, rep)
		if rep.Counts.Admitted != rep.Requests {
			t.Errorf("%s: admitted %d of %d", api, rep.Counts.Admitted, rep.Requests)
		}
	}
}

// TestErrorsAreCountedByCode: requests the daemon rejects (here, more
// descriptors than it takes) are errors, counted by gRPC code.
func TestErrorsAreCountedByCode(t *testing.T) {
	d := daemontest.Start(t, policy, func(c *daemon.Config) {
		c.Bounds = engine.DefaultBounds
		c.Bounds.MaxDescriptors = 1
	})
	rep := run(t, d, loadgen.Config{Workload: workload(t, 0, "generic_key=tiny", "user=u{1..5}"), Callers: 2})
	if rep.Counts.Errors != rep.Requests {
		t.Errorf("errors %d of %d requests, want all", rep.Counts.Errors, rep.Requests)
	}
	if len(rep.Errors) != 1 || rep.Errors[0].Code != "InvalidArgument" || rep.Errors[0].Count != rep.Requests {
		t.Errorf("errors by code %+v, want all InvalidArgument", rep.Errors)
	}
}

// TestServerProcessStats: with the server's pids (here, this process,
// which runs the daemon, twice), the CPU and memory of each are reported.
func TestServerProcessStats(t *testing.T) {
	d := daemontest.Start(t, policy)
	pid := os.Getpid()
	rep := run(t, d, loadgen.Config{Workload: workload(t, 0, "user=u{1..100000}"), PIDs: []int{pid, pid}})
	if len(rep.Servers) != 2 {
		t.Fatalf("server stats %+v, want two", rep.Servers)
	}
	for _, s := range rep.Servers {
		if s.PID != pid || s.Name == "" || s.RSSBytes <= 0 || s.PeakRSSBytes < s.RSSBytes || s.CPUSeconds < 0 {
			t.Errorf("server stats %+v", s)
		}
		if got, want := s.CPUPerRequestUS, s.CPUSeconds*1e6/float64(rep.Requests); got < want*0.999 || got > want*1.001 {
			t.Errorf("CPU %vs over %d requests, but %vµs per request", s.CPUSeconds, rep.Requests, got)
		}
	}
	for _, bad := range []int{1 << 30, 0, -1} {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{Target: d.GRPCAddr(), Workload: workload(t, 0, "k=v"), PIDs: []int{bad}}); err == nil {
			t.Errorf("pid %d was accepted", bad)
		}
	}
}

// TestMutualTLS loads a daemon that requires client certificates: with
// one, every call is decided; without, the run fails to connect.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "server", time.Now().Add(time.Hour)).Write(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	clientCert, clientKey := ca.Client(t, "bench").Write(t, dir, "client")
	d := daemontest.Start(t, policy, func(c *daemon.Config) {
		c.TLS = tlsconfig.Files{Cert: cert, Key: key, ClientCA: caFile}
	})

	rep := run(t, d, loadgen.Config{Workload: workload(t, 0, "generic_key=tiny"), Callers: 2,
		TLS: loadgen.TLS{Enabled: true, CA: caFile, Cert: clientCert, Key: clientKey}})
	if rep.Counts.Admitted != 50 || rep.Counts.Errors != 0 {
		t.Errorf("counts %+v, want 50 admitted and no error", rep.Counts)
	}

	for name, tc := range map[string]loadgen.TLS{
		"no client certificate": {Enabled: true, CA: caFile},
		"plaintext":             {},
	} {
		_, err := loadgen.Run(context.Background(), loadgen.Config{Target: d.GRPCAddr(), Workload: workload(t, 0, "k=v"), TLS: tc, Duration: 100 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "cannot connect") {
			t.Errorf("%s: error %v, want cannot connect", name, err)
		}
	}
}

// TestRefusesRemoteTargets: without AllowRemote nothing that is not
// loopback is loaded, and the error says how to allow it.
func TestRefusesRemoteTargets(t *testing.T) {
	for _, target := range []string{"192.0.2.1:8081", "[2001:db8::1]:8081", "10.1.2.3:80"} {
		_, err := loadgen.Run(context.Background(), loadgen.Config{Target: target, Workload: workload(t, 0, "k=v")})
		if err == nil || !strings.Contains(err.Error(), "--allow-remote") {
			t.Errorf("%s: error %v, want a refusal naming --allow-remote", target, err)
		}
	}
}

// TestNothingListening: a target with no server is an error that says so,
// not a report of errors.
func TestNothingListening(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	_, err = loadgen.Run(context.Background(), loadgen.Config{Target: addr, Workload: workload(t, 0, "k=v")})
	if err == nil || !strings.Contains(err.Error(), "cannot connect to "+addr) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %v, want cannot connect ... refused", err)
	}
}

// TestInterruptReports: a run whose context ends early stops sending and
// reports the part it measured.
func TestInterruptReports(t *testing.T) {
	d := daemontest.Start(t, policy)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rep, err := loadgen.Run(ctx, loadgen.Config{Target: d.GRPCAddr(), Workload: workload(t, 0, "user=u{1..1000}"), Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, rep)
	if rep.ElapsedS <= 0 || rep.ElapsedS > 10 {
		t.Errorf("elapsed %vs, want the 1s until the interrupt", rep.ElapsedS)
	}
}

// TestJSONReport: the JSON report parses back into the same report, with
// the field names documented in docs/operations.md.
func TestJSONReport(t *testing.T) {
	d := daemontest.Start(t, policy)
	rep := run(t, d, loadgen.Config{Workload: workload(t, 0, "generic_key=tiny"), Callers: 2})
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for _, k := range []string{"requests", "requests_per_second", "latency_us", "counts", "ratios", "client"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON report has no %q:\n%s", k, buf.String())
		}
	}
	var back loadgen.Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Counts != rep.Counts || back.Requests != rep.Requests || back.LatencyUS != rep.LatencyUS {
		t.Errorf("JSON round trip: got %+v, want %+v", back, rep)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"admitted", "denied", "over capacity", "errors", "p99.9"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}
