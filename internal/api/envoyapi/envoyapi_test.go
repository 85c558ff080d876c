package envoyapi_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/internal/api/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// t0 is a whole minute since the epoch (and a whole 5 minutes less 60s):
// minute windows start at t0.
var t0 = daemontest.T0.UnixNano()

type harness struct {
	d      *daemontest.Daemon
	clock  *clock.Fake
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
}

// start runs a daemon on loopback serving the policy at path (a file or a
// directory) with a fake clock at t0, and dials it with go-control-plane's
// client. opts adjust the daemon's configuration.
func start(t *testing.T, path string, opts ...func(*daemon.Config)) *harness {
	t.Helper()
	d := daemontest.Start(t, "", append([]func(*daemon.Config){daemontest.Path(path)}, opts...)...)
	conn := d.Dial(t)
	return &harness{d: d, clock: d.Clock, conn: conn, client: rlsv3.NewRateLimitServiceClient(conn)}
}

const shop = "testdata/shop.yaml"

func shadowMode(c *daemon.Config) { c.ShadowMode = true }

func headers(h envoyapi.Headers) func(*daemon.Config) {
	return func(c *daemon.Config) { c.ResponseHeaders = h }
}

func (h *harness) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", text(req), err)
	}
	return resp
}

// desc builds a descriptor from alternating keys and values.
func desc(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets the descriptor's own hits_addend.
func hits(n uint64, d *rlcommonv3.RateLimitDescriptor) *rlcommonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// check makes d a check: its own hits_addend explicitly 0.
func check(d *rlcommonv3.RateLimitDescriptor) *rlcommonv3.RateLimitDescriptor { return hits(0, d) }

// refund makes d a refund of n.
func refund(n uint64, d *rlcommonv3.RateLimitDescriptor) *rlcommonv3.RateLimitDescriptor {
	d = hits(n, d)
	d.IsNegativeHits = true
	return d
}

// override sets the descriptor's limit override; mult 0 leaves
// unit_multiplier unset.
func override(rpu uint32, unit typev3.RateLimitUnit, mult uint32, d *rlcommonv3.RateLimitDescriptor) *rlcommonv3.RateLimitDescriptor {
	d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult != 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return d
}

func req(domain string, ds ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

type (
	unit    = rlsv3.RateLimitResponse_RateLimit_Unit
	dstatus = rlsv3.RateLimitResponse_DescriptorStatus
)

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	okCode = rlsv3.RateLimitResponse_OK
	over   = rlsv3.RateLimitResponse_OVER_LIMIT
)

// limit is a current_limit; mult 0 leaves unit_multiplier unset.
func limit(name string, rpu uint32, u unit, mult uint32) *rlsv3.RateLimitResponse_RateLimit {
	l := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: u}
	if mult != 0 {
		l.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return l
}

func st(code rlsv3.RateLimitResponse_Code, l *rlsv3.RateLimitResponse_RateLimit, remaining uint32, reset time.Duration) *dstatus {
	return &dstatus{Code: code, CurrentLimit: l, LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset)}
}

var (
	unmatched = &dstatus{Code: okCode}
	unlimited = &dstatus{Code: okCode, LimitRemaining: math.MaxUint32}
)

func text(m proto.Message) string { return prototext.MarshalOptions{}.Format(m) }

func wantStatuses(t *testing.T, r *rlsv3.RateLimitResponse, want ...*dstatus) {
	t.Helper()
	if len(r.Statuses) != len(want) {
		t.Fatalf("%d statuses, want %d: %v", len(r.Statuses), len(want), text(r))
	}
	for i := range want {
		if !proto.Equal(r.Statuses[i], want[i]) {
			t.Fatalf("statuses[%d] = {%v}\nwant {%v}", i, text(r.Statuses[i]), text(want[i]))
		}
	}
}

func TestMatching(t *testing.T) {
	h := start(t, shop)
	tests := []struct {
		name   string
		domain string
		desc   *rlcommonv3.RateLimitDescriptor
		want   *dstatus
	}{
		{"exact value", "shop", desc("path", "/checkout"), st(okCode, limit("checkout", 5, minute, 0), 5, 0)},
		{"wildcard prefix", "shop", desc("path", "/api/v1/items"), st(okCode, limit("api", 20, minute, 0), 20, 0)},
		{"wildcard matches its bare prefix", "shop", desc("path", "/api/"), st(okCode, limit("api", 20, minute, 0), 20, 0)},
		{"key only", "shop", desc("path", "/cart"), st(okCode, limit("any_path", 30, minute, 0), 30, 0)},
		{"nested under key only", "shop", desc("path", "/cart", "user", "u1"), st(okCode, limit("per_user", 3, minute, 0), 3, 0)},
		{"no backtracking to key only", "shop", desc("path", "/checkout", "user", "u1"), unmatched},
		{"shallower than the rule", "shop", desc("tenant", "t1"), unmatched},
		{"depth equal to the rule", "shop", desc("tenant", "t1", "plan", "free"), st(okCode, limit("free_plan", 1, second, 0), 1, 0)},
		{"deeper than the rule", "shop", desc("tenant", "t1", "plan", "free", "region", "eu"), unmatched},
		{"value mismatch at depth", "shop", desc("tenant", "t1", "plan", "pro"), unmatched},
		{"unknown key", "shop", desc("region", "eu"), unmatched},
		{"exact unlimited beats key only", "shop", desc("ip", "10.0.0.1"), unlimited},
		{"key only beside an exact value", "shop", desc("ip", "10.0.0.2"), st(okCode, limit("per_ip", 2, second, 0), 2, 0)},
		{"unknown domain", "nowhere", desc("path", "/checkout"), unmatched},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.call(t, req(tt.domain, check(tt.desc)))
			if r.OverallCode != okCode {
				t.Fatalf("overall %v", r.OverallCode)
			}
			wantStatuses(t, r, tt.want)
		})
	}
}

// TestFixedWindow: every field of a status through a window's life.
func TestFixedWindow(t *testing.T) {
	h := start(t, shop)
	h.clock.Advance(10 * time.Second)
	checkout := limit("checkout", 5, minute, 0)
	for i := range 5 {
		r := h.call(t, req("shop", desc("path", "/checkout")))
		if r.OverallCode != okCode {
			t.Fatalf("call %d: %v", i+1, text(r))
		}
		wantStatuses(t, r, st(okCode, checkout, uint32(4-i), 50*time.Second))
	}
	r := h.call(t, req("shop", desc("path", "/checkout")))
	if r.OverallCode != over {
		t.Fatalf("sixth call: %v", text(r))
	}
	wantStatuses(t, r, st(over, checkout, 0, 50*time.Second))
	h.clock.Advance(50 * time.Second) // the next window
	wantStatuses(t, h.call(t, req("shop", desc("path", "/checkout"))), st(okCode, checkout, 4, time.Minute))
}

func TestAllOrNothing(t *testing.T) {
	h := start(t, shop)
	both := req("shop", desc("path", "/checkout"), desc("ip", "192.0.2.1"))
	for range 2 {
		if r := h.call(t, both); r.OverallCode != okCode {
			t.Fatal(text(r))
		}
	}
	r := h.call(t, both)
	if r.OverallCode != over {
		t.Fatalf("third call: %v", text(r))
	}
	// /checkout is reported as it stands: the denied request took nothing.
	wantStatuses(t, r,
		st(okCode, limit("checkout", 5, minute, 0), 3, time.Minute),
		st(over, limit("per_ip", 2, second, 0), 0, time.Second))
	wantStatuses(t, h.call(t, req("shop", check(desc("path", "/checkout")))),
		st(okCode, limit("checkout", 5, minute, 0), 3, time.Minute))
}

func TestStatusesInRequestOrder(t *testing.T) {
	h := start(t, shop)
	r := h.call(t, req("shop", desc("ip", "10.0.0.1"), desc("region", "eu"), desc("path", "/checkout"), desc("ip", "10.0.0.9")))
	wantStatuses(t, r,
		unlimited,
		unmatched,
		st(okCode, limit("checkout", 5, minute, 0), 4, time.Minute),
		st(okCode, limit("per_ip", 2, second, 0), 1, time.Second))
}

func TestUnlimited(t *testing.T) {
	h := start(t, shop)
	for range 10 {
		r := h.call(t, req("shop", desc("ip", "10.0.0.1")))
		if r.OverallCode != okCode {
			t.Fatal(text(r))
		}
		wantStatuses(t, r, unlimited)
	}
}

// TestReplaces: when "search" and "reads" match one request, "reads" is
// dropped: reported OK without a limit, and not counted.
func TestReplaces(t *testing.T) {
	h := start(t, shop)
	both := req("shop", desc("category", "read", "user", "u"), desc("endpoint", "/search", "user", "u"))
	for i := range 3 {
		wantStatuses(t, h.call(t, both), unmatched, st(okCode, limit("search", 10, minute, 0), uint32(9-i), time.Minute))
	}
	reads := req("shop", desc("category", "read", "user", "u"))
	wantStatuses(t, h.call(t, reads), st(okCode, limit("reads", 2, minute, 0), 1, time.Minute))
}

// TestShadowRule: a shadow_mode rule is counted and reported, but its
// status is OK (as upstream's) and it never denies.
func TestShadowRule(t *testing.T) {
	h := start(t, shop)
	trial := req("shop", desc("client", "c"), desc("path", "/cart"))
	h.call(t, trial)
	for i := range 2 {
		r := h.call(t, trial)
		if r.OverallCode != okCode {
			t.Fatalf("a shadow rule denied: %v", text(r))
		}
		wantStatuses(t, r,
			st(okCode, limit("trial", 1, minute, 0), 0, time.Minute),
			st(okCode, limit("any_path", 30, minute, 0), uint32(28-i), time.Minute))
	}
}

// TestGlobalShadowMode: --shadow-mode turns the overall OVER_LIMIT into OK;
// the statuses still say which descriptor would have denied (as upstream),
// and the buckets that admitted the request are charged, since it went
// through.
func TestGlobalShadowMode(t *testing.T) {
	h := start(t, shop, shadowMode, headers(envoyapi.HeadersLegacy))
	for range 5 {
		h.call(t, req("shop", desc("path", "/checkout")))
	}
	r := h.call(t, req("shop", desc("path", "/checkout"), desc("path", "/cart")))
	if r.OverallCode != okCode {
		t.Fatalf("overall %v, want OK in shadow mode", r.OverallCode)
	}
	wantStatuses(t, r,
		st(over, limit("checkout", 5, minute, 0), 0, time.Minute),
		st(okCode, limit("any_path", 30, minute, 0), 29, time.Minute))
	if got, want := headerLines(r), []string{"RateLimit-Limit: 5", "RateLimit-Remaining: 0", "RateLimit-Reset: 60"}; !equal(got, want) {
		t.Fatalf("headers %q, want %q (no Retry-After on OK)", got, want)
	}
	wantStatuses(t, h.call(t, req("shop", check(desc("path", "/cart")))),
		st(okCode, limit("any_path", 30, minute, 0), 29, time.Minute))
}

func TestHitsAddend(t *testing.T) {
	anyPath := limit("any_path", 30, minute, 0)
	tests := []struct {
		name    string
		hits    uint32 // the request's hits_addend
		descs   []*rlcommonv3.RateLimitDescriptor
		overall rlsv3.RateLimitResponse_Code
		want    []*dstatus
	}{
		{"request 0 means 1", 0, []*rlcommonv3.RateLimitDescriptor{desc("path", "/a")}, okCode,
			[]*dstatus{st(okCode, anyPath, 29, time.Minute)}},
		{"request hits", 5, []*rlcommonv3.RateLimitDescriptor{desc("path", "/a")}, okCode,
			[]*dstatus{st(okCode, anyPath, 25, time.Minute)}},
		{"descriptor's own wins", 5, []*rlcommonv3.RateLimitDescriptor{hits(2, desc("path", "/a")), desc("path", "/b")}, okCode,
			[]*dstatus{st(okCode, anyPath, 28, time.Minute), st(okCode, anyPath, 25, time.Minute)}},
		{"descriptor's 0 is a check", 5, []*rlcommonv3.RateLimitDescriptor{check(desc("path", "/a"))}, okCode,
			[]*dstatus{st(okCode, anyPath, 30, 0)}},
		{"more than the capacity", 31, []*rlcommonv3.RateLimitDescriptor{desc("path", "/a")}, over,
			[]*dstatus{st(over, anyPath, 30, 0)}},
		{"more than the capacity charges no other", 0, []*rlcommonv3.RateLimitDescriptor{desc("path", "/a"), hits(31, desc("path", "/b"))}, over,
			[]*dstatus{st(okCode, anyPath, 30, 0), st(over, anyPath, 30, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, shop)
			r := h.call(t, &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: tt.hits, Descriptors: tt.descs})
			if r.OverallCode != tt.overall {
				t.Fatalf("overall %v, want %v", r.OverallCode, tt.overall)
			}
			wantStatuses(t, r, tt.want...)
		})
	}
}

// TestCheck: hits_addend 0 on a descriptor is OVER_LIMIT exactly when a
// request of cost 1 would be denied now, and charges nothing.
func TestCheck(t *testing.T) {
	h := start(t, shop)
	for n := range 5 {
		h.call(t, req("shop", check(desc("path", "/checkout"))))
		h.call(t, req("shop", check(desc("path", "/checkout"))))
		if r := h.call(t, req("shop", desc("path", "/checkout"))); r.OverallCode != okCode {
			t.Fatalf("charge %d after checks: %v; checks must charge nothing", n+1, text(r))
		}
	}
	h.clock.Advance(15 * time.Second)
	for range 2 {
		r := h.call(t, req("shop", check(desc("path", "/checkout"))))
		if r.OverallCode != over {
			t.Fatalf("a check of a spent limit was admitted: %v", text(r))
		}
		wantStatuses(t, r, st(over, limit("checkout", 5, minute, 0), 0, 45*time.Second))
	}
	h.clock.Advance(45 * time.Second)
	r := h.call(t, req("shop", check(desc("path", "/checkout"))))
	wantStatuses(t, r, st(okCode, limit("checkout", 5, minute, 0), 5, 0))
	// The request-level hits_addend 0 still means 1.
	r = h.call(t, &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: 0, Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("path", "/checkout")}})
	wantStatuses(t, r, st(okCode, limit("checkout", 5, minute, 0), 4, time.Minute))
}

// TestTokenBudget is Envoy Gateway's cost.request/cost.response flow on an
// overdraft limit: a check before the request, the tokens used charged
// when the stream ends, in full, into debt; checks are denied until the
// debt is gone; refunds give back exactly what they say.
func TestTokenBudget(t *testing.T) {
	h := start(t, shop, headers(envoyapi.HeadersLegacy))
	tokens := limit("tokens", 1000, minute, 0)
	ok := h.call(t, req("shop", check(desc("tokens", "alice"))))
	wantStatuses(t, ok, st(okCode, tokens, 1000, 0))
	h.clock.Advance(20 * time.Second)
	// A 1,200-token answer against the 1,000-token budget: charged in full,
	// 200 in debt; Envoy ignores this answer.
	r := h.call(t, req("shop", hits(1200, desc("tokens", "alice"))))
	wantStatuses(t, r, st(over, tokens, 0, 40*time.Second))
	// Checks are denied, with an exact Retry-After, until the window ends.
	h.clock.Advance(10 * time.Second)
	r = h.call(t, req("shop", check(desc("tokens", "alice"))))
	wantStatuses(t, r, st(over, tokens, 0, 30*time.Second))
	if got, want := headerLines(r), []string{"RateLimit-Limit: 1000", "RateLimit-Remaining: 0", "RateLimit-Reset: 30", "Retry-After: 30"}; !equal(got, want) {
		t.Errorf("headers of a check in debt\n%q\nwant\n%q", got, want)
	}
	// A refund of 150 leaves 50 in debt: still denied; 51 more is 1 left.
	wantStatuses(t, h.call(t, req("shop", refund(150, desc("tokens", "alice")))), st(okCode, tokens, 0, 30*time.Second))
	wantStatuses(t, h.call(t, req("shop", check(desc("tokens", "alice")))), st(over, tokens, 0, 30*time.Second))
	wantStatuses(t, h.call(t, req("shop", refund(51, desc("tokens", "alice")))), st(okCode, tokens, 1, 30*time.Second))
	wantStatuses(t, h.call(t, req("shop", check(desc("tokens", "alice")))), st(okCode, tokens, 1, 30*time.Second))
	// A refund never goes past a full budget.
	wantStatuses(t, h.call(t, req("shop", refund(5000, desc("tokens", "alice")))), st(okCode, tokens, 1000, 0))
	// The window's end pays any debt.
	h.call(t, req("shop", hits(3000, desc("tokens", "alice"))))
	h.clock.Advance(30 * time.Second)
	wantStatuses(t, h.call(t, req("shop", check(desc("tokens", "alice")))), st(okCode, tokens, 1000, 0))
}

// TestRefundOnAnOrdinaryLimit: is_negative_hits gives units back on any
// limit, never past rest.
func TestRefundOnAnOrdinaryLimit(t *testing.T) {
	h := start(t, shop)
	checkout := limit("checkout", 5, minute, 0)
	h.call(t, &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: 4, Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("path", "/checkout")}})
	wantStatuses(t, h.call(t, req("shop", refund(3, desc("path", "/checkout")))), st(okCode, checkout, 4, time.Minute))
	wantStatuses(t, h.call(t, req("shop", refund(3, desc("path", "/checkout")))), st(okCode, checkout, 5, 0))
	// The request's hits_addend is the refund when the descriptor has none.
	h.call(t, req("shop", desc("path", "/checkout")))
	d := desc("path", "/checkout")
	d.IsNegativeHits = true
	r := h.call(t, &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: 1, Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	wantStatuses(t, r, st(okCode, checkout, 5, 0))
}

func TestLimitOverride(t *testing.T) {
	t.Run("unmatched descriptor in a known domain", func(t *testing.T) {
		h := start(t, shop)
		d := override(2, typev3.RateLimitUnit_MINUTE, 0, desc("tenant_id", "acme"))
		want := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: minute}
		wantStatuses(t, h.call(t, req("shop", d)), st(okCode, want, 1, time.Minute))
		wantStatuses(t, h.call(t, req("shop", d)), st(okCode, want, 0, time.Minute))
		r := h.call(t, req("shop", d))
		if r.OverallCode != over {
			t.Fatal(text(r))
		}
		wantStatuses(t, r, st(over, want, 0, time.Minute))
	})
	t.Run("replaces the rule's limit", func(t *testing.T) {
		h := start(t, shop)
		d := override(1, typev3.RateLimitUnit_SECOND, 0, desc("path", "/checkout"))
		want := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: second}
		wantStatuses(t, h.call(t, req("shop", d)), st(okCode, want, 0, time.Second))
		wantStatuses(t, h.call(t, req("shop", d)), st(over, want, 0, time.Second))
		// The rule's own bucket was not touched.
		wantStatuses(t, h.call(t, req("shop", check(desc("path", "/checkout")))), st(okCode, limit("checkout", 5, minute, 0), 5, 0))
	})
	t.Run("unit_multiplier", func(t *testing.T) {
		h := start(t, shop)
		d := override(3, typev3.RateLimitUnit_SECOND, 30, desc("tenant_id", "acme"))
		want := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 3, Unit: second, UnitMultiplier: wrapperspb.UInt32(30)}
		wantStatuses(t, h.call(t, req("shop", d)), st(okCode, want, 2, 30*time.Second))
	})
	t.Run("ignored in an unknown domain", func(t *testing.T) {
		h := start(t, shop)
		d := override(1, typev3.RateLimitUnit_SECOND, 0, desc("path", "/checkout"))
		for range 3 {
			r := h.call(t, req("nowhere", d))
			if r.OverallCode != okCode {
				t.Fatal(text(r))
			}
			wantStatuses(t, r, unmatched)
		}
	})
}

// TestAlgorithms: every algorithm of the policy extensions answers through
// v3: capacity admitted, then OVER_LIMIT, with the limit as written.
func TestAlgorithms(t *testing.T) {
	tests := []struct {
		value    string
		limit    *rlsv3.RateLimitResponse_RateLimit
		capacity uint32
		reset    time.Duration // duration_until_reset after the first call
	}{
		{"fixed", limit("", 2, second, 0), 2, time.Second},
		{"sliding", limit("", 2, second, 0), 2, -1},
		{"token", limit("", 2, second, 0), 4, 500 * time.Millisecond},
		{"leaky", limit("", 2, second, 0), 4, 500 * time.Millisecond},
		{"queue", limit("", 2, second, 0), 4, -1},
		{"five_minutes", limit("", 2, minute, 5), 2, time.Minute}, // t0 is 4 minutes into its 5
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			h := start(t, shop)
			r0 := req("shop", desc("algo", tt.value))
			for i := range tt.capacity {
				r := h.call(t, r0)
				s := r.Statuses[0]
				if r.OverallCode != okCode || s.Code != okCode || s.LimitRemaining != tt.capacity-1-i || !proto.Equal(s.CurrentLimit, tt.limit) {
					t.Fatalf("call %d: %v", i+1, text(r))
				}
				if i == 0 && tt.reset >= 0 && s.DurationUntilReset.AsDuration() != tt.reset {
					t.Fatalf("duration_until_reset %v, want %v", s.DurationUntilReset.AsDuration(), tt.reset)
				}
			}
			r := h.call(t, r0)
			if s := r.Statuses[0]; r.OverallCode != over || s.Code != over || s.LimitRemaining != 0 || !proto.Equal(s.CurrentLimit, tt.limit) {
				t.Fatalf("call %d: %v", tt.capacity+1, text(r))
			}
		})
	}
}

func headerLines(r *rlsv3.RateLimitResponse) []string {
	var out []string
	for _, h := range r.GetResponseHeadersToAdd() {
		out = append(out, h.GetKey()+": "+h.GetValue())
	}
	return out
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

func TestHeaders(t *testing.T) {
	checkout := func() *rlcommonv3.RateLimitDescriptor { return desc("path", "/checkout") }
	repeat := func(n int, r *rlsv3.RateLimitRequest) []*rlsv3.RateLimitRequest {
		var rs []*rlsv3.RateLimitRequest
		for range n {
			rs = append(rs, r)
		}
		return rs
	}
	tests := []struct {
		name   string
		style  envoyapi.Headers
		before []*rlsv3.RateLimitRequest // at t0+10s, like the request
		req    *rlsv3.RateLimitRequest
		want   []string
	}{
		{"off", envoyapi.HeadersOff, nil, req("shop", checkout()), nil},
		{"legacy", envoyapi.HeadersLegacy, nil, req("shop", checkout()),
			[]string{"RateLimit-Limit: 5", "RateLimit-Remaining: 4", "RateLimit-Reset: 50"}},
		{"legacy: the fewest remaining of several", envoyapi.HeadersLegacy, nil, req("shop", desc("path", "/cart"), checkout()),
			[]string{"RateLimit-Limit: 5", "RateLimit-Remaining: 4", "RateLimit-Reset: 50"}},
		{"legacy: denied, with Retry-After", envoyapi.HeadersLegacy, repeat(5, req("shop", checkout())), req("shop", checkout()),
			[]string{"RateLimit-Limit: 5", "RateLimit-Remaining: 0", "RateLimit-Reset: 50", "Retry-After: 50"}},
		{"legacy: a bucket's limit is its burst", envoyapi.HeadersLegacy, nil, req("shop", desc("algo", "token")),
			[]string{"RateLimit-Limit: 4", "RateLimit-Remaining: 3", "RateLimit-Reset: 1"}},
		{"legacy: Retry-After is the longest wait of the denials", envoyapi.HeadersLegacy,
			append(repeat(2, req("shop", desc("ip", "192.0.2.1"), checkout())), repeat(3, req("shop", checkout()))...),
			req("shop", desc("ip", "192.0.2.1"), checkout()),
			[]string{"RateLimit-Limit: 5", "RateLimit-Remaining: 0", "RateLimit-Reset: 50", "Retry-After: 50"}},
		{"draft", envoyapi.HeadersDraft, nil, req("shop", checkout()),
			[]string{`RateLimit-Policy: "checkout";q=5;w=60`, `RateLimit: "checkout";r=4;t=50`}},
		{"draft: a bucket refills its burst in burst/rate", envoyapi.HeadersDraft, nil, req("shop", desc("algo", "token")),
			[]string{`RateLimit-Policy: "shop.algo_token";q=4;w=2`, `RateLimit: "shop.algo_token";r=3;t=1`}},
		{"draft: denied, with Retry-After", envoyapi.HeadersDraft, repeat(5, req("shop", checkout())), req("shop", checkout()),
			[]string{`RateLimit-Policy: "checkout";q=5;w=60`, `RateLimit: "checkout";r=0;t=50`, "Retry-After: 50"}},
		{"draft: names are escaped", envoyapi.HeadersDraft, nil, req("shop", desc("quoted", "x")),
			[]string{`RateLimit-Policy: "say \"hi\"\\now";q=3;w=60`, `RateLimit: "say \"hi\"\\now";r=2;t=50`}},
		{"draft: a name that is not ASCII", envoyapi.HeadersDraft, nil, req("shop", desc("accented", "x")),
			[]string{`RateLimit-Policy: "default";q=3;w=60`, `RateLimit: "default";r=2;t=50`}},
		{"none for unmatched and unlimited", envoyapi.HeadersLegacy, nil, req("shop", desc("region", "eu"), desc("ip", "10.0.0.1")), nil},
		{"none for a shadow rule", envoyapi.HeadersLegacy, repeat(3, req("shop", desc("client", "c"))), req("shop", desc("client", "c")), nil},
		{"over capacity: no Retry-After", envoyapi.HeadersLegacy, nil, req("shop", hits(6, checkout())),
			[]string{"RateLimit-Limit: 5", "RateLimit-Remaining: 5", "RateLimit-Reset: 0"}},
		{"deny all: no Retry-After", envoyapi.HeadersLegacy, nil, req("shop", desc("banned", "x")),
			[]string{"RateLimit-Limit: 0", "RateLimit-Remaining: 0", "RateLimit-Reset: 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, shop, headers(tt.style))
			h.clock.Advance(10 * time.Second)
			for _, r := range tt.before {
				h.call(t, r)
			}
			if got := headerLines(h.call(t, tt.req)); !equal(got, tt.want) {
				t.Fatalf("headers\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestInvalidArgument(t *testing.T) {
	long := strings.Repeat("x", 2000)
	many := make([]*rlcommonv3.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = desc("k", "v")
	}
	deep := desc()
	for range 17 {
		deep.Entries = append(deep.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string // the message's start: the field
	}{
		{"empty domain", req("", desc("k", "v")), "domain: must not be empty"},
		{"no descriptors", req("shop"), "descriptors: "},
		{"descriptor without entries", req("shop", desc()), "descriptors[0].entries: "},
		{"empty key", req("shop", desc("k", "v"), desc("", "v")), "descriptors[1].entries[0].key: "},
		{"too many descriptors", req("shop", many...), "descriptors: "},
		{"too many entries", req("shop", deep), "descriptors[0].entries: "},
		{"value too long", req("shop", desc("k", long)), "descriptors[0].entries[0].value: "},
		{"a check and a refund of one bucket", req("shop", check(desc("path", "/a")), refund(1, desc("path", "/a"))), "descriptors[1]: asks refund of the bucket that descriptors[0] asks check of"},
		{"override of an unknown unit", req("shop", override(1, typev3.RateLimitUnit_UNKNOWN, 0, desc("k", "v"))), "descriptors[0].limit.unit: "},
		{"override of unit_multiplier 0", req("shop", desc("k", "v"), override(1, typev3.RateLimitUnit_SECOND, 0, desc("k", "v"))), ""},
		{"override of 0 requests", req("shop", override(0, typev3.RateLimitUnit_SECOND, 0, desc("k", "v"))), "descriptors[0].limit: "},
		{"override longer than any period", req("shop", override(1, typev3.RateLimitUnit_YEAR, math.MaxUint32, desc("k", "v"))), "descriptors[0].limit: "},
		{"override checked in an unknown domain too", req("nowhere", override(0, typev3.RateLimitUnit_SECOND, 0, desc("k", "v"))), "descriptors[0].limit: "},
	}
	// unit_multiplier 0 cannot be written with override(), which leaves 0 unset.
	tests[9].req.Descriptors[1].Limit.UnitMultiplier = wrapperspb.UInt32(0)
	tests[9].want = "descriptors[1].limit.unit_multiplier: "
	h := start(t, shop)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.ShouldRateLimit(context.Background(), tt.req)
			s, _ := status.FromError(err)
			if s.Code() != codes.InvalidArgument || !strings.HasPrefix(s.Message(), tt.want) {
				t.Fatalf("got %v %q, want InvalidArgument starting %q", s.Code(), s.Message(), tt.want)
			}
		})
	}
}

func TestHealthNamesTheService(t *testing.T) {
	h := start(t, shop)
	resp, err := healthpb.NewHealthClient(h.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: envoyapi.ServiceName})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of %s: %v %v", envoyapi.ServiceName, resp, err)
	}
	if envoyapi.ServiceName != rlsv3.RateLimitService_ServiceDesc.ServiceName {
		t.Fatalf("ServiceName %q, generated %q", envoyapi.ServiceName, rlsv3.RateLimitService_ServiceDesc.ServiceName)
	}
}

// TestHeadersFlag: --response-headers alone means legacy.
func TestHeadersFlag(t *testing.T) {
	for in, want := range map[string]envoyapi.Headers{
		"true": envoyapi.HeadersLegacy, "legacy": envoyapi.HeadersLegacy, "draft": envoyapi.HeadersDraft,
		"off": envoyapi.HeadersOff, "false": envoyapi.HeadersOff, "none": envoyapi.HeadersOff,
	} {
		var h envoyapi.Headers
		if err := h.Set(in); err != nil || h != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, h, err, want)
		}
	}
	var h envoyapi.Headers
	if err := h.Set("ietf"); err == nil {
		t.Error("Set(ietf) succeeded")
	}
	if !h.IsBoolFlag() {
		t.Error("not a bool flag: a bare --response-headers would need a value")
	}
}
