package daemon_test

import (
	"context"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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
