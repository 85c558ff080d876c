package topdenied_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/observe/topdenied"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// BenchmarkObserve is the tracker's cost per decision it observes, at the
// daemon's size (300 places a stripe): a request of one descriptor
// [path=/orders, user=…] matched by a rule, admitted; denied again (its
// descriptor counted already); and denied as a new descriptor each time
// (a flood of distinct values, each taking the least counted place).
func BenchmarkObserve(b *testing.B) {
	b.Run("admitted", func(b *testing.B) {
		tr := topdenied.New(300, topdenied.Plain)
		req, resp := decided("default", []algorithms.Code{algorithms.Allowed}, user("alice"))
		b.ReportAllocs()
		for b.Loop() {
			tr.Observe(req, resp)
		}
	})
	b.Run("denied-known", func(b *testing.B) {
		tr := topdenied.New(300, topdenied.Plain)
		req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user("alice"))
		b.ReportAllocs()
		for b.Loop() {
			tr.Observe(req, resp)
		}
	})
	b.Run("denied-flood", func(b *testing.B) {
		// Every denial a new descriptor: each takes the least counted place.
		tr := topdenied.New(300, topdenied.Plain)
		const n = 1 << 16
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("user-%d", i)
		}
		req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user(""))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			req.Descriptors[0].Entries[1].Value = names[i%n]
			i++
			tr.Observe(req, resp)
		}
	})
}

// BenchmarkEngineDenied is what the tracker adds to the engine's denied
// decisions: one request [path=/orders, user=user-0042] of the default
// policy, over its per-user limit (the clock stands still), decided by the
// engine and the memory store with no observer; with an observer that
// does nothing (what any observer costs: the decision is timed); with the
// tracker observing; and with the daemon's observer without the tracker
// (the metrics) and with it (the metrics, then the tracker).
func BenchmarkEngineDenied(b *testing.B) {
	tr := topdenied.New(300, topdenied.Plain)
	m := metrics.New()
	for _, tc := range []struct {
		name string
		opts []engine.Option
	}{
		{"none", nil},
		{"noop", []engine.Option{engine.WithObserver(func(context.Context, *engine.Request, *engine.Response, time.Duration) {})}},
		{"tracker", []engine.Option{engine.WithObserver(func(_ context.Context, req *engine.Request, resp *engine.Response, _ time.Duration) {
			tr.Observe(req, resp)
		})}},
		{"metrics", []engine.Option{engine.WithObserver(m.Observe)}},
		{"metrics+tracker", []engine.Option{engine.WithObserver(func(ctx context.Context, req *engine.Request, resp *engine.Response, took time.Duration) {
			m.Observe(ctx, req, resp, took)
			tr.Observe(req, resp)
		})}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := engine.New(config.Default(), memory.New(clock.NewFake(1e18)), tc.opts...)
			req := &engine.Request{Domain: "default", Descriptors: []engine.Descriptor{{Entries: user("user-0042")}}}
			var resp engine.Response
			for resp.Code == algorithms.Allowed {
				if err := e.ShouldRateLimit(context.Background(), req, &resp); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := e.ShouldRateLimit(context.Background(), req, &resp); err != nil || resp.Code != algorithms.Denied {
					b.Fatalf("code %v, error %v; want denied", resp.Code, err)
				}
			}
		})
	}
}

// BenchmarkNew reports, as B/op, all the memory a tracker of the daemon's
// size holds (it allocates everything up front and nothing afterwards).
func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		topdenied.New(300, topdenied.Plain)
	}
}
