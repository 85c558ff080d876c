package console

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/operator/admin"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// bigPolicy has n rules in one domain.
func bigPolicy(b *testing.B, n int) *config.Policy {
	var y strings.Builder
	y.WriteString("domain: big\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&y, "  - key: path\n    value: /api/v1/resource-%d\n    rate_limit: {name: r%d, algorithm: token_bucket, unit: minute, requests_per_unit: %d, burst: %d}\n", i, i, 100+i, 200+i)
	}
	p, err := config.Parse("big.yaml", []byte(y.String()))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkPolicyEndpoint10kRules is one GET /console/api/policy of a
// policy of 10,000 rules.
func BenchmarkPolicyEndpoint10kRules(b *testing.B) {
	p := bigPolicy(b, 10_000)
	c := New(Options{Policy: func() admin.Loaded { return admin.Loaded{Policy: p, At: time.Now()} }})
	b.ReportAllocs()
	var size int
	for b.Loop() {
		w := httptest.NewRecorder()
		c.policy(w, httptest.NewRequest("GET", "/console/api/policy", nil))
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size), "body-bytes")
}

// BenchmarkLiveSample10kRules is one sample of the live view (every rule's
// counters read, rates computed, the busiest ranked) with 10,000 rules
// counting.
func BenchmarkLiveSample10kRules(b *testing.B) {
	p := bigPolicy(b, 10_000)
	m := metrics.New()
	m.PolicyLoaded(p, time.Now())
	e := engine.New(p, memory.New(clock.NewFake(0)), engine.WithObserver(m.Observe))
	for i := range 10_000 { // every rule counts a hit
		req := &engine.Request{Domain: "big", Descriptors: []engine.Descriptor{{Entries: []config.Entry{{Key: "path", Value: fmt.Sprintf("/api/v1/resource-%d", i)}}}}}
		if err := e.ShouldRateLimit(context.Background(), req, &engine.Response{}); err != nil {
			b.Fatal(err)
		}
	}
	l := newLive(m.RuleTotals)
	l.view(time.Now())
	if n := len(l.prev); n != 10_000 {
		b.Fatalf("%d rules sampled; want 10000", n)
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		l.view(now)
	}
}
