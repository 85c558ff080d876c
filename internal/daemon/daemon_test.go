package daemon_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// t0 is daemontest.T0: a whole minute since the epoch, so minute windows
// start at t0.
var t0 = daemontest.T0.UnixNano()

type harness struct {
	d      *daemontest.Daemon
	clock  *clock.Fake
	client rl.RateLimitServiceClient
	conn   *grpc.ClientConn
}

// start runs a daemon on loopback with the given policy (empty for the
// embedded default) and a fake clock at t0, and dials it.
func start(t *testing.T, policy string) *harness {
	t.Helper()
	d := daemontest.Start(t, policy)
	conn := d.Dial(t)
	return &harness{d: d, clock: d.Clock, client: rl.NewRateLimitServiceClient(conn), conn: conn}
}

func (h *harness) call(t *testing.T, req *rl.ShouldRateLimitRequest) *rl.ShouldRateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// desc builds a descriptor from alternating keys and values.
func desc(kv ...string) *rl.Descriptor {
	d := &rl.Descriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rl.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func req(domain string, ds ...*rl.Descriptor) *rl.ShouldRateLimitRequest {
	return &rl.ShouldRateLimitRequest{Domain: domain, Descriptors: ds}
}

func peek(d *rl.Descriptor) *rl.Descriptor {
	d.Hits = proto.Uint32(0)
	return d
}

func TestDefaultPolicyPerUserPerEndpoint(t *testing.T) {
	h := start(t, "")
	alice := req("default",
		desc("generic_key", "global"),
		desc("path", "/orders"),
		desc("path", "/orders", "user", "alice"))
	for i := range 800 {
		if r := h.call(t, alice); r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("call %d: %v, want OK", i+1, r)
		}
	}
	r := h.call(t, alice)
	if r.OverallCode != rl.Code_CODE_OVER_LIMIT {
		t.Fatalf("call 801: %v, want OVER_LIMIT", r.OverallCode)
	}
	if got := r.RetryAfter.AsDuration(); got != 100*time.Millisecond {
		t.Fatalf("retry_after %v, want 100ms (one token at 600 per minute)", got)
	}
	user := r.Statuses[2]
	if user.Code != rl.Code_CODE_OVER_LIMIT || user.Rule.GetName() != "per-user-per-endpoint" || user.Remaining != 0 {
		t.Fatalf("user status %v", user)
	}
	for _, s := range r.Statuses[:2] {
		if s.Code != rl.Code_CODE_OK {
			t.Fatalf("global and endpoint tiers should still admit: %v", s)
		}
	}
	// Nothing was charged by the denial: the endpoint tier has 4000-800.
	if got := r.Statuses[1].Remaining; got != 3200 {
		t.Fatalf("endpoint remaining after the denied call: %d, want 3200", got)
	}
	// Another user on the same endpoint is unaffected.
	bob := req("default", desc("path", "/orders", "user", "bob"))
	if r := h.call(t, bob); r.OverallCode != rl.Code_CODE_OK {
		t.Fatalf("bob: %v", r)
	}
	// Retry-after comes true: 1ns early is still denied, on time admits.
	h.clock.Advance(100*time.Millisecond - 1)
	if r := h.call(t, alice); r.OverallCode != rl.Code_CODE_OVER_LIMIT {
		t.Fatal("admitted 1ns before retry_after")
	}
	h.clock.Advance(1)
	if r := h.call(t, alice); r.OverallCode != rl.Code_CODE_OK {
		t.Fatal("denied at retry_after")
	}
}

const matchPolicy = `
domain: shop
descriptors:
  - key: path
    value: /orders
    rate_limit: {unit: minute, requests_per_unit: 10, name: orders}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 20, name: api-prefix}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 30, name: any-path}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: second, requests_per_unit: 1, name: free-plan}
`

func TestMatching(t *testing.T) {
	tests := []struct {
		name     string
		desc     *rl.Descriptor
		wantRule string // "" for unmatched
	}{
		{"exact value", desc("path", "/orders"), "orders"},
		{"wildcard prefix", desc("path", "/api/v2/items"), "api-prefix"},
		{"key only", desc("path", "/cart"), "any-path"},
		{"nested under key only", desc("path", "/cart", "user", "u1"), "per-user"},
		{"nested under exact value falls to nothing (no backtracking)", desc("path", "/orders", "user", "u1"), ""},
		{"unknown key", desc("region", "eu"), ""},
		{"depth shorter than rule", desc("tenant", "t1"), ""},
		{"depth equal", desc("tenant", "t1", "plan", "free"), "free-plan"},
		{"depth longer than rule", desc("tenant", "t1", "plan", "free", "x", "y"), ""},
		{"value mismatch at depth", desc("tenant", "t1", "plan", "pro"), ""},
	}
	h := start(t, matchPolicy)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := h.call(t, req("shop", peek(tt.desc))).Statuses[0]
			if st.Code != rl.Code_CODE_OK {
				t.Errorf("code %v, want OK", st.Code)
			}
			if got := st.Rule.GetName(); got != tt.wantRule || st.Matched != (tt.wantRule != "") {
				t.Errorf("matched=%v rule %q, want rule %q", st.Matched, got, tt.wantRule)
			}
		})
	}
}

func TestKeyOnlyGivesEachValueItsOwnBucket(t *testing.T) {
	h := start(t, matchPolicy)
	for range 3 {
		h.call(t, req("shop", desc("path", "/cart", "user", "u1")))
	}
	if r := h.call(t, req("shop", desc("path", "/cart", "user", "u1"))); r.OverallCode != rl.Code_CODE_OVER_LIMIT {
		t.Fatal("u1's fourth call admitted")
	}
	if r := h.call(t, req("shop", desc("path", "/cart", "user", "u2"))); r.OverallCode != rl.Code_CODE_OK {
		t.Fatal("u2 limited by u1's bucket")
	}
	if r := h.call(t, req("shop", desc("path", "/home", "user", "u1"))); r.OverallCode != rl.Code_CODE_OK {
		t.Fatal("u1 on another path limited by /cart's bucket")
	}
}

const tiersPolicy = `
domain: tiers
descriptors:
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 10, name: wide}
  - key: narrow
    rate_limit: {unit: minute, requests_per_unit: 2, name: narrow}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: shadowed}
  - key: free
    rate_limit: {unlimited: true, name: free}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0, name: blocked}
  - key: api
    rate_limits:
      - {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 5, name: burst}
      - {algorithm: fixed_window, unit: minute, requests_per_unit: 8, name: sustained}
`

func TestAllOrNothing(t *testing.T) {
	h := start(t, tiersPolicy)
	both := req("tiers", desc("wide", "k"), desc("narrow", "k"))
	for range 2 {
		if r := h.call(t, both); r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("%v", r)
		}
	}
	for range 3 {
		r := h.call(t, both)
		if r.OverallCode != rl.Code_CODE_OVER_LIMIT {
			t.Fatalf("%v", r)
		}
		if r.Statuses[0].Code != rl.Code_CODE_OK || r.Statuses[1].Code != rl.Code_CODE_OVER_LIMIT {
			t.Fatalf("statuses %v", r.Statuses)
		}
		if got := r.RetryAfter.AsDuration(); got != time.Minute {
			t.Fatalf("retry_after %v, want the rest of the minute window", got)
		}
	}
	// Only the two admitted requests were charged on "wide".
	if got := h.call(t, req("tiers", peek(desc("wide", "k")))).Statuses[0].Remaining; got != 8 {
		t.Fatalf("wide remaining %d, want 8", got)
	}
}

func TestPeek(t *testing.T) {
	h := start(t, tiersPolicy)
	h.call(t, req("tiers", desc("narrow", "k")))
	for range 3 {
		r := h.call(t, req("tiers", peek(desc("narrow", "k"))))
		if r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Remaining != 1 {
			t.Fatalf("peek: %v", r)
		}
	}
	// Request-level hits apply to descriptors without their own; a
	// descriptor's own 0 still peeks.
	r := h.call(t, &rl.ShouldRateLimitRequest{Domain: "tiers", Hits: 4,
		Descriptors: []*rl.Descriptor{desc("wide", "k"), peek(desc("narrow", "k"))}})
	if r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Remaining != 6 || r.Statuses[1].Remaining != 1 {
		t.Fatalf("hits 4 + peek: %v", r)
	}
}

func TestShadowUnlimitedUnknownDomain(t *testing.T) {
	h := start(t, tiersPolicy)
	h.call(t, req("tiers", desc("shadowed", "k")))
	r := h.call(t, req("tiers", desc("shadowed", "k"), desc("wide", "k")))
	if r.OverallCode != rl.Code_CODE_OK {
		t.Fatalf("shadow rule denied the request: %v", r)
	}
	if s := r.Statuses[0]; !s.Shadow || s.Code != rl.Code_CODE_OVER_LIMIT {
		t.Fatalf("shadow status should report what it would have done: %v", s)
	}
	if s := h.call(t, req("tiers", desc("free", "k"))).Statuses[0]; s.Code != rl.Code_CODE_OK || !s.Rule.GetUnlimited() || s.Remaining != 1<<32-1 {
		t.Fatalf("unlimited: %v", s)
	}
	r = h.call(t, req("nowhere", desc("wide", "k")))
	if r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Matched || r.Statuses[0].Rule != nil {
		t.Fatalf("unknown domain: %v", r)
	}
}

func TestSeveralLimitsOnOneDescriptor(t *testing.T) {
	h := start(t, tiersPolicy)
	api := req("tiers", desc("api", "k"))
	for i := range 5 {
		if r := h.call(t, api); r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("call %d: %v", i+1, r)
		}
	}
	r := h.call(t, api)
	if s := r.Statuses[0]; s.Code != rl.Code_CODE_OVER_LIMIT || s.Rule.GetName() != "burst" || r.RetryAfter.AsDuration() != 100*time.Millisecond {
		t.Fatalf("sixth call: want denied by burst with retry 100ms, got %v", r)
	}
	h.clock.Advance(300 * time.Millisecond) // three more tokens
	for range 3 {
		if r := h.call(t, api); r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("%v", r)
		}
	}
	// 8 admitted this minute: the sustained limit now decides, until the
	// window ends.
	h.clock.Advance(time.Second)
	r = h.call(t, api)
	want := time.Minute - 1300*time.Millisecond
	if s := r.Statuses[0]; s.Code != rl.Code_CODE_OVER_LIMIT || s.Rule.GetName() != "sustained" || r.RetryAfter.AsDuration() != want {
		t.Fatalf("want denied by sustained with retry %v, got %v", want, r)
	}
}

// TestDenyAll: requests_per_unit 0 denies every request for good, as
// envoyproxy/ratelimit reads it, and charges nothing elsewhere.
func TestDenyAll(t *testing.T) {
	h := start(t, tiersPolicy)
	r := h.call(t, req("tiers", desc("wide", "k"), desc("blocked", "x")))
	if r.OverallCode != rl.Code_CODE_OVER_LIMIT || r.RetryAfter != nil {
		t.Fatalf("want OVER_LIMIT without retry_after: %v", r)
	}
	if s := r.Statuses[1]; s.Code != rl.Code_CODE_OVER_CAPACITY || s.Rule.GetName() != "blocked" {
		t.Fatalf("blocked status: %v", s)
	}
	if s := r.Statuses[0]; s.Code != rl.Code_CODE_OK || s.Remaining != 10 {
		t.Fatalf("wide should be reported uncharged (10 remaining): %v", s)
	}
	if s := h.call(t, req("tiers", peek(desc("blocked", "x")))).Statuses[0]; s.Code != rl.Code_CODE_OK || s.Remaining != 0 {
		t.Fatalf("peek at a deny-all rule: %v", s)
	}
}

func TestInlineLimit(t *testing.T) {
	h := start(t, "")
	d := desc("tenant", "acme")
	d.Limit = &rl.Limit{Algorithm: rl.Algorithm_ALGORITHM_SLIDING_WINDOW, Requests: 2, Period: durationpb.New(time.Second), Name: "inline"}
	for range 2 {
		if r := h.call(t, req("no-policy", d)); r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("%v", r)
		}
	}
	r := h.call(t, req("no-policy", d))
	if r.OverallCode != rl.Code_CODE_OVER_LIMIT || r.Statuses[0].Rule.GetName() != "inline" ||
		r.Statuses[0].Rule.GetAlgorithm() != rl.Algorithm_ALGORITHM_SLIDING_WINDOW {
		t.Fatalf("%v", r)
	}
}

func TestCostAboveCapacity(t *testing.T) {
	h := start(t, tiersPolicy)
	d := desc("narrow", "k")
	d.Hits = proto.Uint32(3)
	r := h.call(t, req("tiers", d, desc("wide", "k")))
	if r.OverallCode != rl.Code_CODE_OVER_LIMIT || r.Statuses[0].Code != rl.Code_CODE_OVER_CAPACITY || r.RetryAfter != nil {
		t.Fatalf("cost 3 on a limit of 2 must be over capacity with no retry_after: %v", r)
	}
}

func TestInvalidArgument(t *testing.T) {
	long := strings.Repeat("x", 2000)
	many := make([]*rl.Descriptor, 65)
	for i := range many {
		many[i] = desc("k", "v")
	}
	deep := desc()
	for range 17 {
		deep.Entries = append(deep.Entries, &rl.Entry{Key: "k", Value: "v"})
	}
	withLimit := func(l *rl.Limit) *rl.Descriptor {
		d := desc("k", "v")
		d.Limit = l
		return d
	}
	sec := durationpb.New(time.Second)
	tests := []struct {
		name      string
		req       *rl.ShouldRateLimitRequest
		wantField string
	}{
		{"empty domain", req("", desc("k", "v")), "domain"},
		{"no descriptors", req("d"), "descriptors"},
		{"descriptor without entries", req("d", desc()), "descriptors[0].entries"},
		{"empty key", req("d", desc("k", "v"), desc("", "v")), "descriptors[1].entries[0].key"},
		{"too many descriptors", req("d", many...), "descriptors"},
		{"too many entries", req("d", deep), "descriptors[0].entries"},
		{"key too long", req("d", desc(long, "v")), "descriptors[0].entries[0].key"},
		{"value too long", req("d", desc("k", long)), "descriptors[0].entries[0].value"},
		{"domain too long", req(long, desc("k", "v")), "domain"},
		{"inline limit without requests", req("d", withLimit(&rl.Limit{Period: sec})), "descriptors[0].limit"},
		{"inline limit without period", req("d", withLimit(&rl.Limit{Requests: 1})), "descriptors[0].limit"},
		{"inline limit with negative period", req("d", withLimit(&rl.Limit{Requests: 1, Period: durationpb.New(-time.Second)})), "descriptors[0].limit"},
		{"inline burst on a window", req("d", withLimit(&rl.Limit{Requests: 1, Period: sec, Burst: 5})), "descriptors[0].limit"},
		{"inline unknown algorithm", req("d", withLimit(&rl.Limit{Algorithm: 99, Requests: 1, Period: sec})), "descriptors[0].limit.algorithm"},
		{"inline limit name too long", req("d", withLimit(&rl.Limit{Requests: 1, Period: sec, Name: long})), "descriptors[0].limit.name"},
	}
	h := start(t, "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.ShouldRateLimit(context.Background(), tt.req)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
			if !strings.HasPrefix(st.Message(), tt.wantField+": ") {
				t.Fatalf("message %q does not name field %q", st.Message(), tt.wantField)
			}
		})
	}
}

func TestConcurrentCallersAdmitExactlyTheBound(t *testing.T) {
	h := start(t, tiersPolicy)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				r, err := h.client.ShouldRateLimit(context.Background(), req("tiers", desc("wide", "shared")))
				if err != nil {
					t.Error(err)
					return
				}
				if r.OverallCode == rl.Code_CODE_OK {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 10 {
		t.Fatalf("admitted %d of 320, want exactly 10", got)
	}
}

func TestHealthAndReflection(t *testing.T) {
	h := start(t, "")
	hc, err := healthpb.NewHealthClient(h.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit.v1.RateLimitService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + h.d.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), "ratelimit.v1.RateLimitService") {
		t.Fatalf("reflection lists %v", names)
	}
}

func TestBadPolicyFailsStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644)
	_, err := daemon.Start(daemon.Config{ConfigPath: path, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("want an error naming the file and the bad unit, got %v", err)
	}
}
