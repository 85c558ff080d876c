package metrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/config"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/metrics"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

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
	count := func() (n int, missing string) {
		got := scrape(t, m)
		for i := range rules {
			if _, ok := got[rule("hits_total", fmt.Sprintf("k_v%d", i), "")]; ok {
				n++
			} else {
				missing = fmt.Sprintf("v%d", i)
			}
		}
		return n, missing
	}
	n, missing := count()
	if n != metrics.MaxPrecreatedRules {
		t.Fatalf("%d rules with series before any hit, want %d", n, metrics.MaxPrecreatedRules)
	}
	e := engine.New(p, memory.New(clock.NewFake(t0)), engine.WithObserver(m.Observe))
	send(t, e, []call{{descriptors: [][]string{{"k", missing}}}})
	if got := scrape(t, m)[rule("hits_total", "k_"+missing, "")]; got != 1 {
		t.Errorf("hits of %s after its first hit: %v, want 1", missing, got)
	}
}
