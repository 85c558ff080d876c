package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// The policy of docs/envoy.md's concurrency recipe: 2 streams in flight per
// tenant, a unit never released expiring after 10 minutes; and 5 requests
// a minute per tenant beside it.
const concurrencyDomain = `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {algorithm: concurrency, max_in_flight: 2, lease: 10m}
  - key: tenant_rate
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestConcurrencyOverEnvoy plays Envoy's concurrency recipe over a real
// gRPC connection (Envoy's v3 API): each stream charges 1 on the request
// path and, with apply_on_stream_done and is_negative_hits, gives it back
// when it is done. Streams that end and streams that fail are released at
// once; a stream that never ends (its Envoy crashed) holds its unit until
// its lease, on the daemon's fake clock, and not a nanosecond less. The
// same on the memory store and on Redis (whose scripts decide at the
// daemon's clock).
func TestConcurrencyOverEnvoy(t *testing.T) {
	t.Run("memory", func(t *testing.T) { concurrencyOverEnvoy(t) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		fc := clock.NewFake(daemontest.T0.UnixNano())
		concurrencyOverEnvoy(t, withRedis(srv.Addr(), guard.FailClosed), func(c *daemon.Config) {
			c.Clock, c.Redis.Clock = fc, fc
		})
	})
}

// concurrencyOverEnvoy is TestConcurrencyOverEnvoy on a daemon configured
// by opts.
func concurrencyOverEnvoy(t *testing.T, opts ...func(*daemon.Config)) {
	opts = append(opts, func(c *daemon.Config) { c.ResponseHeaders = envoyapi.HeadersLegacy })
	d := daemontest.Start(t, concurrencyDomain, opts...)
	c := rlsv3.NewRateLimitServiceClient(d.Dial(t))
	ctx := context.Background()
	call := func(release bool, keys ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		r := &rlsv3.RateLimitRequest{Domain: "llm"}
		for _, k := range keys {
			r.Descriptors = append(r.Descriptors, &rlcommon.RateLimitDescriptor{
				Entries:        []*rlcommon.RateLimitDescriptor_Entry{{Key: k, Value: "acme"}},
				IsNegativeHits: release,
			})
		}
		resp, err := c.ShouldRateLimit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	start := func() *rlsv3.RateLimitResponse { t.Helper(); return call(false, "tenant") }
	done := func() { // the stream-done call, however the stream ended
		t.Helper()
		if resp := call(true, "tenant"); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("a release: %v", resp.GetOverallCode())
		}
	}
	want := func(what string, resp *rlsv3.RateLimitResponse, code rlsv3.RateLimitResponse_Code, remaining uint32) {
		t.Helper()
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != code || st.GetLimitRemaining() != remaining {
			t.Fatalf("%s: %v with %d remaining, want %v with %d", what, resp.GetOverallCode(), st.GetLimitRemaining(), code, remaining)
		}
		if lim := st.GetCurrentLimit(); lim.GetRequestsPerUnit() != 2 {
			t.Fatalf("%s: current_limit %v, want 2 in flight", what, lim)
		}
	}

	want("stream A starts", start(), rlsv3.RateLimitResponse_OK, 1)
	want("stream B starts", start(), rlsv3.RateLimitResponse_OK, 0)
	denied := start()
	want("stream C, a third at once", denied, rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	// Nothing released, the first units free themselves when their lease
	// ends: 10m after T0 and the rest of T0's slot of 100s.
	leaseEnd := leaseEnd(daemontest.T0, 10*time.Minute)
	if got := denied.GetStatuses()[0].GetDurationUntilReset().AsDuration(); got != leaseEnd.Sub(daemontest.T0) {
		t.Errorf("stream C's duration_until_reset %v, want the lease's end, %v", got, leaseEnd.Sub(daemontest.T0))
	}
	// The client's 429 says the limit, none free, and the wait for a unit
	// to expire by its lease (whole seconds, rounded up).
	headers := map[string]string{}
	for _, h := range denied.GetResponseHeadersToAdd() {
		headers[h.GetKey()] = h.GetValue()
	}
	wantHeaders := map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "660", "Retry-After": "660"}
	for k, v := range wantHeaders {
		if headers[k] != v {
			t.Errorf("stream C's %s: %q, want %q (all: %v)", k, headers[k], v, headers)
		}
	}

	done() // stream A ends
	want("stream C retried after A ended", start(), rlsv3.RateLimitResponse_OK, 0)
	done() // stream B fails: Envoy's stream-done call is the same
	want("stream D after B failed", start(), rlsv3.RateLimitResponse_OK, 0)
	// C and D never end: their Envoy crashed.

	// All or nothing: a stream that the rate beside it denies takes no
	// unit of the concurrency.
	for range 5 {
		call(false, "tenant_rate")
	}
	d.Clock.Advance(time.Second)
	done() // C... or D: a release gives back the oldest unit
	if resp := call(false, "tenant", "tenant_rate"); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a stream over the rate: %v", resp)
	}
	want("the stream denied by the rate took no unit", start(), rlsv3.RateLimitResponse_OK, 0)

	// The two units left were charged at T0 and T0+1s, in one slot, and
	// never released: they hold until their lease ends, then free
	// themselves.
	d.Clock.Set(leaseEnd.UnixNano() - 1)
	want("1ns before the lease ends", start(), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	d.Clock.Set(leaseEnd.UnixNano())
	want("at the lease's end, healed", start(), rlsv3.RateLimitResponse_OK, 1)

	// The rule's metrics count the charges, the denials (a third stream at
	// once, and the one 1ns before the lease's end) and the releases.
	m := scrape(t, d)
	for series, want := range map[string]float64{
		`ratelimitd_rule_hits_total{descriptor="",domain="llm",rule="tenant"}`:            9, // 8 starts, and the one the rate beside it denied
		`ratelimitd_rule_over_limit_hits_total{descriptor="",domain="llm",rule="tenant"}`: 2,
		`ratelimitd_rule_refunded_hits_total{descriptor="",domain="llm",rule="tenant"}`:   3,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
}

// leaseEnd returns when a unit charged at t with the given lease expires:
// lease after the last nanosecond of t's slot of lease/6 (rounded up),
// the slots aligned to the Unix epoch.
func leaseEnd(t time.Time, lease time.Duration) time.Time {
	g := (int64(lease) + 5) / 6
	ns := t.UnixNano()
	return time.Unix(0, ns-ns%g+g-1+int64(lease))
}

// TestConcurrencyOverV1: the ratelimit.v1 API names a concurrency
// (ALGORITHM_CONCURRENCY) both ways. A policy's concurrency rule is
// described as one, with max_in_flight as requests and the lease as
// period, not as the fixed window an unset algorithm means; and an inline
// ALGORITHM_CONCURRENCY limit counts units in flight, released by
// OPERATION_REFUND. A burst on it is InvalidArgument naming the field.
func TestConcurrencyOverV1(t *testing.T) {
	h := start(t, concurrencyDomain)
	r := h.call(t, req("llm", desc("tenant", "acme")))
	rule := r.GetStatuses()[0].GetRule()
	if r.GetOverallCode() != rl.Code_CODE_OK || rule.GetAlgorithm() != rl.Algorithm_ALGORITHM_CONCURRENCY ||
		rule.GetRequests() != 2 || rule.GetPeriod().AsDuration() != 10*time.Minute || rule.GetBurst() != 0 {
		t.Fatalf("the policy's concurrency over v1: %v", r)
	}

	inline := func(op rl.Operation) *rl.Descriptor {
		d := desc("job", "build")
		d.Limit = &rl.Limit{Algorithm: rl.Algorithm_ALGORITHM_CONCURRENCY, Requests: 2, Period: durationpb.New(time.Minute), Name: "builds"}
		d.Operation = op
		return d
	}
	for i, step := range []struct {
		op        rl.Operation
		code      rl.Code
		remaining uint64
	}{
		{rl.Operation_OPERATION_CHARGE, rl.Code_CODE_OK, 1},
		{rl.Operation_OPERATION_CHARGE, rl.Code_CODE_OK, 0},
		{rl.Operation_OPERATION_CHARGE, rl.Code_CODE_OVER_LIMIT, 0}, // a third at once
		{rl.Operation_OPERATION_REFUND, rl.Code_CODE_OK, 1},
		{rl.Operation_OPERATION_CHARGE, rl.Code_CODE_OK, 0}, // the released unit's place
		{rl.Operation_OPERATION_CHARGE, rl.Code_CODE_OVER_LIMIT, 0},
	} {
		r := h.call(t, req("no-policy", inline(step.op)))
		st := r.GetStatuses()[0]
		if st.GetCode() != step.code || st.GetRemaining() != step.remaining ||
			st.GetRule().GetAlgorithm() != rl.Algorithm_ALGORITHM_CONCURRENCY || st.GetRule().GetName() != "builds" {
			t.Fatalf("step %d (%v): %v, want %v with %d remaining", i, step.op, st, step.code, step.remaining)
		}
	}
	// Nothing released, the units heal at their lease's end.
	h.clock.Set(leaseEnd(daemontest.T0, time.Minute).UnixNano())
	if st := h.call(t, req("no-policy", inline(rl.Operation_OPERATION_CHARGE))).GetStatuses()[0]; st.GetCode() != rl.Code_CODE_OK || st.GetRemaining() != 1 {
		t.Fatalf("after the lease: %v", st)
	}

	bad := inline(rl.Operation_OPERATION_CHARGE)
	bad.Limit.Burst = 3
	_, err := h.client.ShouldRateLimit(context.Background(), req("no-policy", bad))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].limit") || !strings.Contains(err.Error(), "burst") {
		t.Fatalf("a concurrency with a burst: %v, want InvalidArgument naming descriptors[0].limit and burst", err)
	}
}

// TestConcurrencyMetrics reads a concurrency rule's in-flight gauges from
// a running daemon's /metrics: the units its last decision left in
// flight, and its max_in_flight. A charge the request's other descriptor
// denied took no unit and leaves the gauge alone; a check after the
// lease shows the units healed.
func TestConcurrencyMetrics(t *testing.T) {
	h := start(t, concurrencyDomain)
	const series = `{descriptor="",domain="llm",rule="tenant"}`
	want := func(what string, inFlight float64) {
		t.Helper()
		m := scrape(t, h.d)
		if m["ratelimitd_rule_in_flight"+series] != inFlight || m["ratelimitd_rule_in_flight_limit"+series] != 2 {
			t.Fatalf("%s: in_flight %v, in_flight_limit %v; want %v and 2", what, m["ratelimitd_rule_in_flight"+series], m["ratelimitd_rule_in_flight_limit"+series], inFlight)
		}
		if _, ok := m[`ratelimitd_rule_in_flight{descriptor="",domain="llm",rule="tenant_rate"}`]; ok {
			t.Fatalf("%s: a rate rule has an in_flight series", what)
		}
	}
	if _, ok := scrape(t, h.d)["ratelimitd_rule_in_flight"+series]; ok {
		t.Fatal("an in_flight series before the rule's first decision")
	}
	acme := func(op rl.Operation) *rl.Descriptor { d := desc("tenant", "acme"); d.Operation = op; return d }
	h.call(t, req("llm", acme(rl.Operation_OPERATION_CHARGE)))
	want("one charged", 1)
	h.call(t, req("llm", acme(rl.Operation_OPERATION_CHARGE)))
	want("two charged", 2)
	if r := h.call(t, req("llm", acme(rl.Operation_OPERATION_CHARGE))); r.GetOverallCode() != rl.Code_CODE_OVER_LIMIT {
		t.Fatalf("a third at once: %v", r)
	}
	want("a third denied", 2)
	h.call(t, req("llm", acme(rl.Operation_OPERATION_REFUND)))
	want("one released", 1)
	for range 5 {
		h.call(t, req("llm", desc("tenant_rate", "acme")))
	}
	if r := h.call(t, req("llm", acme(rl.Operation_OPERATION_CHARGE), desc("tenant_rate", "acme"))); r.GetOverallCode() != rl.Code_CODE_OVER_LIMIT ||
		r.GetStatuses()[0].GetCode() != rl.Code_CODE_OK {
		t.Fatalf("a charge the rate beside it denies: %v", r)
	}
	want("a charge the rate denied took no unit", 1)
	h.call(t, req("llm", peek(acme(rl.Operation_OPERATION_CHARGE))))
	want("a peek sets nothing", 1)
	h.clock.Set(leaseEnd(daemontest.T0, 10*time.Minute).UnixNano())
	h.call(t, req("llm", acme(rl.Operation_OPERATION_CHECK)))
	want("a check after the lease", 0)
}
