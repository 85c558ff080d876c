package metrics_test

import (
	"context"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// TestUsageChargedAfterwards: checks, overdraft charges and refunds count
// on their own series; overdraft hits count as hits too, refunds and
// checks do not.
func TestUsageChargedAfterwards(t *testing.T) {
	p, err := config.Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: tokens\n    rate_limit: {unit: minute, requests_per_unit: 100, overdraft: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	e := engine.New(p, memory.New(clock.NewFake(t0)), engine.WithObserver(m.Observe))
	do := func(op engine.Op, hits uint64) {
		var resp engine.Response
		req := &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{{Entries: []config.Entry{{Key: "tokens", Value: "t"}}, Op: op, Hits: &hits}}}
		if err := e.ShouldRateLimit(context.Background(), req, &resp); err != nil {
			t.Fatal(err)
		}
	}
	do(engine.OpCheck, 0)   // admitted
	do(engine.OpCharge, 70) // overdraft, within
	do(engine.OpCharge, 50) // overdraft, 20 in debt: over
	do(engine.OpCheck, 0)   // denied
	do(engine.OpRefund, 30) // 10 left
	do(engine.OpCheck, 0)   // admitted
	do(engine.OpCharge, 0)  // a peek: nothing
	want := map[string]float64{
		rule("hits_total", "tokens", ""):              120,
		rule("within_limit_hits_total", "tokens", ""): 70,
		rule("over_limit_hits_total", "tokens", ""):   50,
		rule("overdraft_hits_total", "tokens", ""):    120,
		rule("refunded_hits_total", "tokens", ""):     30,
		rule("checks_total", "tokens", ""):            3,
		rule("over_limit_checks_total", "tokens", ""): 1,
	}
	got := scrape(t, m)
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
}
