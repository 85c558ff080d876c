package metrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// hitsByRule returns ratelimitd_rule_hits_total by rule, read from the
// registry (cheaper than scraping 90,000 series as text).
func hitsByRule(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	hits := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "ratelimitd_rule_hits_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "rule" {
					hits[l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	return hits
}

func has(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// TestPrecreatedRulesBounded: a policy of more rules than
// MaxPrecreatedRules has the series of MaxPrecreatedRules of them before
// any hit, and a rule without one gets its series at its first hit.
func TestPrecreatedRulesBounded(t *testing.T) {
	const rules = metrics.MaxPrecreatedRules + 50
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range rules {
		fmt.Fprintf(&b, "  - {key: k, value: v%d, rate_limit: {unit: hour, requests_per_unit: 5}}\n", i)
	}
	p, err := config.Parse("d.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.PolicyLoaded(p, time.Now())
	hits := hitsByRule(t, m)
	if len(hits) != metrics.MaxPrecreatedRules {
		t.Fatalf("%d rules with series before any hit, want %d", len(hits), metrics.MaxPrecreatedRules)
	}
	missing := ""
	for i := range rules {
		if v := fmt.Sprintf("v%d", i); !has(hits, "k_"+v) {
			missing = v
			break
		}
	}
	e := engine.New(p, memory.New(clock.NewFake(t0)), engine.WithObserver(m.Observe))
	send(t, e, []call{{descriptors: [][]string{{"k", missing}}}})
	if got, ok := hitsByRule(t, m)["k_"+missing]; !ok || got != 1 {
		t.Errorf("hits of %s after its first hit: %v (present %v), want 1", missing, got, ok)
	}
}
