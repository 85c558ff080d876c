package rlqsapi_test

import (
	"fmt"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/envoyfilter"
	"github.com/ratelimitd/ratelimitd/internal/testkit/quotasim"
)

// The Envoys share one limit: simL requests per second, reporting every
// second (the filter's reporting_interval).
const simL = 1000

const simPolicy = `
domain: mesh
descriptors:
  - key: route
    value: checkout
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// envoyFilter is Envoy's filter (envoyfilter) as a quotasim client, with
// Envoy's default behaviours (allow all without an assignment).
type envoyFilter struct{ *envoyfilter.Filter }

func newEnvoy(origin int64) quotasim.Local {
	return envoyFilter{envoyfilter.New(envoyfilter.Config{}, origin)}
}

func (e envoyFilter) Starts() []quotasim.Start {
	var s []quotasim.Start
	for _, x := range e.Filter.Starts {
		s = append(s, quotasim.Start{At: x.At, MaxTokens: x.MaxTokens, Full: true})
	}
	return s
}

func (e envoyFilter) Applies(now int64) (uint32, uint32, time.Duration, bool, bool) {
	m, per, fill, rule, ok := e.Filter.Applies(now)
	return m, per, fill, ok && fill == 0 && rule == typev3.RateLimitStrategy_DENY_ALL, ok
}

func (e envoyFilter) Report(bucket map[string]string, now int64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return e.Filter.Report(bucket, now)
}

// scenario is N clients of the bucket with skewed demand (together twice
// the limit) that changes every six report intervals: skewed, reversed,
// half of them quiet, three levels.
func scenario(n int, daemons []*daemontest.Daemon, local func(int64) quotasim.Local) quotasim.Scenario {
	h := 0.0
	for i := 1; i <= n; i++ {
		h += 1 / float64(i)
	}
	phase := func(f func(i int) float64) []int64 {
		d := make([]int64, n)
		for i := range d {
			d[i] = int64(f(i))
		}
		return d
	}
	return quotasim.Scenario{
		Daemons: daemons, Limit: simL, Period: time.Second, R: time.Second,
		Domain: "mesh", Bucket: map[string]string{"route": "checkout"}, NewLocal: local, Clients: n,
		Phases: [][]int64{
			phase(func(i int) float64 { return 2 * simL / float64(i+1) / h }),
			phase(func(i int) float64 { return 2 * simL / float64(n-i) / h }),
			phase(func(i int) float64 { return float64(i%2) * 4 * simL / float64(n+1) }),
			phase(func(i int) float64 { return simL / float64(n) / 2 * float64(1+3*(i%3)) }),
		},
		IntervalsEach: 6, CheckFairAfter: 2,
	}
}

// checkBound checks what the clients admitted in every window of one
// second and of one report interval, starting every 10ms: under
// assignments, at most the limit plus the bound (each client's max tokens
// in force and those of the token buckets started full in the window);
// and in windows with no new bucket and no request decided by a
// fallback, with ten clients or fewer, a bound of at most 10% of the
// limit. It checks too that no client starts a new token bucket in the
// last three intervals of a phase: steady demand, identical assignments.
func checkBound(t *testing.T, sc quotasim.Scenario, res quotasim.Result) {
	t.Helper()
	var worst, worstSteady quotasim.Window // the most admitted
	windows := res.Windows(sc, time.Second, 10*time.Millisecond)
	if sc.R != time.Second { // and every report interval
		windows = append(windows, res.Windows(sc, sc.R, 10*time.Millisecond)...)
	}
	for _, w := range windows {
		if w.Admitted-w.Unassigned > w.Rate+w.Bound {
			t.Errorf("+%v: admitted %d under assignments (%d more by fallback) > %d + bound %d (%d new buckets)",
				time.Duration(w.From-res.Start), w.Admitted-w.Unassigned, w.Unassigned, w.Rate, w.Bound, w.NewBuckets)
		}
		if w.Admitted > worst.Admitted {
			worst = w
		}
		if w.NewBuckets == 0 && w.Unassigned == 0 {
			if sc.Clients <= 10 && w.Bound*10 > w.Rate*int64(time.Second)/w.Length {
				t.Errorf("+%v, steady: bound %d > 10%% of %d", time.Duration(w.From-res.Start), w.Bound, w.Rate)
			}
			if w.Admitted > worstSteady.Admitted {
				worstSteady = w
			}
		}
	}
	t.Logf("N=%d, R=%v: the most admitted in %v: %d of %d (bound %d, %d by fallback, %d new buckets); steady: %d (bound %d)",
		sc.Clients, sc.R, time.Duration(worst.Length), worst.Admitted, worst.Rate, worst.Bound, worst.Unassigned, worst.NewBuckets, worstSteady.Admitted, worstSteady.Bound)
	for p := range sc.Phases {
		from := res.Start + int64(p*sc.IntervalsEach+3)*int64(sc.R)
		to := res.Start + int64((p+1)*sc.IntervalsEach)*int64(sc.R)
		for i, starts := range res.Starts {
			for _, s := range starts {
				if s.At >= from && s.At < to {
					t.Errorf("phase %d, steady: client %d started a new token bucket at +%v", p, i, time.Duration(s.At-res.Start))
				}
			}
		}
	}
	for _, u := range res.Unfair {
		t.Error(u)
	}
	if t.Failed() {
		t.Log(quotasim.Debug(sc))
	}
}

// TestEnvoys runs N Envoys (the filter's own arithmetic: envoyfilter)
// against a real daemon over real gRPC streams, on the daemon's fake
// clock, and checks what they admit together against the limit and the
// stated bound, that two intervals after each change every share is within
// 10% of its max-min fair share, and that steady demand brings identical
// assignments (no new token bucket).
func TestEnvoys(t *testing.T) {
	for _, n := range []int{3, 10, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			sc := scenario(n, []*daemontest.Daemon{daemontest.Start(t, simPolicy)}, newEnvoy)
			checkBound(t, sc, quotasim.Run(t, sc))
		})
	}
	// A reporting_interval of 2s: TTLs of 3s, windows of 1s and 2s.
	t.Run("10, R=2s", func(t *testing.T) {
		sc := scenario(10, []*daemontest.Daemon{daemontest.Start(t, simPolicy)}, newEnvoy)
		sc.R = 2 * time.Second
		for _, p := range sc.Phases {
			for i := range p {
				p[i] *= 2 // requests per R
			}
		}
		checkBound(t, sc, quotasim.Run(t, sc))
	})
}

// TestEnvoysAcrossDaemons: the same, the Envoys spread over three daemons
// on one Redis, which share the limit through the ledger (package quota,
// "Limits shared by several daemons").
func TestEnvoysAcrossDaemons(t *testing.T) {
	srv := redistest.Start(t)
	for _, n := range []int{3, 10, 99} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clk := clock.NewFake(daemontest.T0.UnixNano())
			daemons := make([]*daemontest.Daemon, 3)
			for i := range daemons {
				daemons[i] = daemontest.Start(t, simPolicy, func(c *daemon.Config) {
					c.Clock, c.Store = clk, "redis"
					c.Redis = redisstore.Config{Addr: srv.Addr(), Timeout: 2 * time.Second, KeyPrefix: fmt.Sprintf("envoys%d:", n),
						Clock: clk, Linger: redisstore.MaxLinger}
				})
			}
			sc := scenario(n, daemons, newEnvoy)
			sc.Ledger = true
			checkBound(t, sc, quotasim.Run(t, sc))
		})
	}
}
