package redis_test

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestMetrics: the store exports the metrics docs/redis.md lists, and a
// request decided by the failure mode counts once.
func TestMetrics(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	s := newTestStore(t, redis.Config{Addr: proxy.Addr(), DenyCache: 10}, clock.NewFake(t0))
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
				if c := x.GetCounter(); c != nil {
					m[f.GetName()] = c.GetValue()
				} else {
					m[f.GetName()] = x.GetGauge().GetValue()
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
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "m"), Limit: l, Cost: 1}
	apply(t, s, charge)
	proxy.SetDown(true)
	apply(t, s, charge)
	m := metrics()
	for name, v := range map[string]float64{
		"ratelimitd_redis_requests_total":           2,
		"ratelimitd_redis_fallback_decisions_total": 1,
		"ratelimitd_redis_up":                       0,
	} {
		if m[name] != v {
			t.Errorf("after a request from Redis and one with Redis down: %s = %v, want %v", name, m[name], v)
		}
	}
}
