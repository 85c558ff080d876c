package redis_test

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestMetrics: the store exports the metrics docs/redis.md lists, and a
// request decided by the failure mode counts once.
func TestMetrics(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	s := newGuardedStore(t, redis.Config{Addr: proxy.Addr()}, guard.Config{DenyCache: 10}, clock.NewFake(t0))
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collectors()...)
	metrics := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		m := make(map[string]float64)
		for _, f := range families {
			for _, x := range f.GetMetric() {
				name := f.GetName()
				for _, l := range x.GetLabel() {
					if l.GetName() != "failure_mode" {
						name += "{" + l.GetName() + "=" + l.GetValue() + "}"
					}
				}
				switch {
				case x.GetCounter() != nil:
					m[name] = x.GetCounter().GetValue()
				case x.GetHistogram() != nil:
					m[name+"_count"] = float64(x.GetHistogram().GetSampleCount())
				default:
					m[name] = x.GetGauge().GetValue()
				}
			}
		}
		return m
	}
	var names []string
	for name := range metrics() {
		names = append(names, name)
	}
	slices.Sort(names)
	want := []string{ // docs/redis.md, "Metrics"
		"ratelimitd_redis_batch_size_count",
		"ratelimitd_redis_breaker_open_decisions_total",
		"ratelimitd_redis_breaker_state",
		"ratelimitd_redis_breaker_transitions_total{to=closed}",
		"ratelimitd_redis_breaker_transitions_total{to=half_open}",
		"ratelimitd_redis_breaker_transitions_total{to=open}",
		"ratelimitd_redis_bucket_operations_total{path=bignum}",
		"ratelimitd_redis_bucket_operations_total{path=fast}",
		"ratelimitd_redis_deny_cache_entries",
		"ratelimitd_redis_deny_cache_hits_total",
		"ratelimitd_redis_fallback_decisions_total",
		"ratelimitd_redis_requests_total",
		"ratelimitd_redis_round_trips_total",
		"ratelimitd_redis_undone_shares_total",
		"ratelimitd_redis_up",
	}
	if !slices.Equal(names, want) {
		t.Errorf("metrics %q, want %q", names, want)
	}

	l := mustLimit(t, algorithms.FixedWindow, 10, time.Hour, 0)
	huge := mustLimit(t, algorithms.FixedWindow, 10, algorithms.MaxSpan, 0) // a period beyond the fast path
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "m"), Limit: l, Cost: 1}
	apply(t, s, charge)
	apply(t, s, charge, store.Charge{Domain: "shop", Key: engineKey("shop", "h"), Limit: huge, Cost: 1})
	proxy.SetDown(true)
	apply(t, s, charge)
	m := metrics()
	for name, v := range map[string]float64{
		"ratelimitd_redis_requests_total":                       3,
		"ratelimitd_redis_round_trips_total":                    4, // the first loads the script: EVALSHA, EVAL
		"ratelimitd_redis_batch_size_count":                     3,
		"ratelimitd_redis_bucket_operations_total{path=fast}":   2,
		"ratelimitd_redis_bucket_operations_total{path=bignum}": 1,
		"ratelimitd_redis_fallback_decisions_total":             1,
		"ratelimitd_redis_up":                                   0,
		"ratelimitd_redis_breaker_state":                        0, // one failure: still closed
	} {
		if m[name] != v {
			t.Errorf("after two requests from Redis and one with Redis down: %s = %v, want %v", name, m[name], v)
		}
	}
}
