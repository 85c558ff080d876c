package metrics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// upstream returns the name of one of envoyproxy/ratelimit's series.
func upstream(name, key1, key2 string) string {
	return `ratelimit_service_rate_limit_` + name + `{domain="d",key1="` + key1 + `",key2="` + key2 + `"}`
}

func TestUpstreamNames(t *testing.T) {
	m := metrics.New(metrics.WithUpstreamNames(true))
	p, err := config.Parse("d.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	m.PolicyLoaded(p, time.Now())
	m.PolicyReloaded(nil, time.Now(), errors.New("bad"))
	e := newEngine(t, m)
	send(t, e, []call{
		{descriptors: [][]string{{"k", "a"}}, times: 11},
		{descriptors: [][]string{{"shadowed", "a"}}, times: 2},
		{descriptors: [][]string{{"path", "/orders", "user", "alice"}}, times: 3},
	})
	got := scrape(t, m)
	for series, want := range map[string]float64{
		// One level deep: key1 only, key2 empty.
		upstream("total_hits", "k", ""):   11,
		upstream("within_limit", "k", ""): 10,
		upstream("near_limit", "k", ""):   2,
		upstream("over_limit", "k", ""):   1,
		upstream("shadow_mode", "k", ""):  0,
		// shadow_mode counts the hits let through.
		upstream("over_limit", "shadowed", ""):  1,
		upstream("shadow_mode", "shadowed", ""): 1,
		// Two levels, detailed_metric: the request's values, as upstream's key.
		upstream("total_hits", "path_/orders", "user_alice"): 3,
		upstream("over_limit", "path_/orders", "user_alice"): 1,
		// Ratelimitd's own series are still there.
		rule("hits_total", "k", ""): 11,
		// Loads: the one above (a reload succeeding counts too), and the
		// refused one.
		"ratelimit_service_config_load_success": 1,
		"ratelimit_service_config_load_error":   1,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if f, ok := got["go_memstats_gc_cpu_fraction"]; !ok || f < 0 || f > 1 {
		t.Errorf("go_memstats_gc_cpu_fraction = %v (present %v), want a fraction", f, ok)
	}
}

func TestUpstreamNamesOffByDefault(t *testing.T) {
	m := metrics.New()
	send(t, newEngine(t, m), []call{{descriptors: [][]string{{"k", "a"}}}})
	for series := range scrape(t, m) {
		if len(series) > 18 && series[:18] == "ratelimit_service_" {
			t.Errorf("series %s without WithUpstreamNames", series)
		}
	}
}
