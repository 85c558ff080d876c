package metrics_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// BenchmarkObserve is the cost of counting one admitted descriptor: on a
// plain rule (baseline), on a detailed_metric rule for values seen before,
// and on one flooded with a new value every time, past the cap of series
// (the overflow series, without a lock).
func BenchmarkObserve(b *testing.B) {
	p, err := config.Parse("d.yaml", []byte(policy))
	if err != nil {
		b.Fatal(err)
	}
	status := func(entries []config.Entry) engine.Status {
		r := p.Domain("d").Match(entries)
		return engine.Status{Code: algorithms.Allowed, Matched: true, Rule: r, Limit: r.Limits[0], Remaining: 5, Cost: 1}
	}
	user := func(v string) []config.Entry {
		return []config.Entry{{Key: "path", Value: "/orders"}, {Key: "user", Value: v}}
	}
	for _, bb := range []struct {
		name    string
		entries func(i int64) []config.Entry
	}{
		{"plain rule", func(int64) []config.Entry { return []config.Entry{{Key: "k", Value: "a"}} }},
		{"detailed, 100 known values", func(i int64) []config.Entry { return user(strconv.FormatInt(i%100, 10)) }},
		{"detailed, a new value each time", func(i int64) []config.Entry { return user(strconv.FormatInt(i, 10)) }},
	} {
		b.Run(bb.name, func(b *testing.B) {
			m := metrics.New()
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					entries := bb.entries(n.Add(1))
					req := &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{{Entries: entries}}}
					resp := &engine.Response{Code: algorithms.Allowed, Statuses: []engine.Status{status(entries)}}
					m.Observe(context.Background(), req, resp, time.Microsecond)
				}
			})
		})
	}
	// A concurrency rule also sets its in-flight gauges.
	pc, err := config.Parse("c.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: concurrency, max_in_flight: 10, lease: 1m}\n"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("concurrency rule", func(b *testing.B) {
		m := metrics.New()
		entries := []config.Entry{{Key: "k", Value: "a"}}
		r := pc.Domain("d").Match(entries)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req := &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{{Entries: entries}}}
				resp := &engine.Response{Code: algorithms.Allowed, Statuses: []engine.Status{{Code: algorithms.Allowed, Matched: true, Rule: r, Limit: r.Limits[0], Remaining: 5, Cost: 1}}}
				m.Observe(context.Background(), req, resp, time.Microsecond)
			}
		})
	})
}
