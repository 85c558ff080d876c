package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// BenchmarkShouldRateLimitWithMetrics is BenchmarkShouldRateLimit with the
// daemon's metrics observing every decision: the cost of per-rule counters
// and the latency histogram on the hot path.
func BenchmarkShouldRateLimitWithMetrics(b *testing.B) {
	m := metrics.New()
	e := engine.New(config.Default(), memory.New(clock.NewMonotonic()), engine.WithObserver(m.Observe))
	reqs := make([]engine.Request, 4096)
	for i := range reqs {
		reqs[i] = engine.Request{Domain: "default", Descriptors: []engine.Descriptor{{Entries: []config.Entry{
			{Key: "path", Value: "/orders"},
			{Key: "user", Value: fmt.Sprintf("user-%04d", i)},
		}}}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var resp engine.Response
		i := 0
		for pb.Next() {
			if err := e.ShouldRateLimit(context.Background(), &reqs[i%len(reqs)], &resp); err != nil {
				b.Error(err)
				return
			}
			i += 7
		}
	})
}
