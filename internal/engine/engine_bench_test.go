package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// BenchmarkShouldRateLimit measures one request with one descriptor —
// [path, user] under the default policy — through validation, matching,
// the memory store and the decision, spread over 4096 users. Run with
// -cpu 1,2 to see how it scales with cores.
func BenchmarkShouldRateLimit(b *testing.B) { benchmarkPerUser(b, Descriptor{}) }

// benchmarkPerUser sends requests of one descriptor like d, [path, user]
// under the default policy, spread over 4096 users.
func benchmarkPerUser(b *testing.B, d Descriptor) {
	e := New(config.Default(), memory.New(clock.NewMonotonic()))
	reqs := make([]Request, 4096)
	for i := range reqs {
		d.Entries = []config.Entry{{Key: "path", Value: "/orders"}, {Key: "user", Value: fmt.Sprintf("user-%04d", i)}}
		reqs[i] = Request{Domain: "default", Descriptors: []Descriptor{d}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var resp Response
		i := 0
		for pb.Next() {
			if err := e.ShouldRateLimit(context.Background(), &reqs[i%len(reqs)], &resp); err != nil {
				b.Error(err)
				return
			}
			if !resp.Statuses[0].Matched {
				b.Error("descriptor did not match the per-user rule")
				return
			}
			i += 7
		}
	})
}

// BenchmarkShouldRateLimitThreeTiers is the default policy's full request:
// global, per-endpoint and per-user descriptors, all-or-nothing.
func BenchmarkShouldRateLimitThreeTiers(b *testing.B) {
	e := New(config.Default(), memory.New(clock.NewMonotonic()))
	reqs := make([]Request, 4096)
	for i := range reqs {
		path := fmt.Sprintf("/endpoint-%d", i%16)
		reqs[i] = Request{Domain: "default", Descriptors: []Descriptor{
			{Entries: []config.Entry{{Key: "generic_key", Value: "global"}}},
			{Entries: []config.Entry{{Key: "path", Value: path}}},
			{Entries: []config.Entry{{Key: "path", Value: path}, {Key: "user", Value: fmt.Sprintf("user-%04d", i)}}},
		}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var resp Response
		i := 0
		for pb.Next() {
			if err := e.ShouldRateLimit(context.Background(), &reqs[i%len(reqs)], &resp); err != nil {
				b.Error(err)
				return
			}
			if resp.Code == algorithms.OverCapacity {
				b.Error("unexpected")
			}
			i += 7
		}
	})
}

// BenchmarkShouldRateLimitCheck is BenchmarkShouldRateLimit with every
// request a check (OpCheck, as Envoy's hits_addend 0): it must cost no
// more than the charge.
func BenchmarkShouldRateLimitCheck(b *testing.B) {
	zero := uint64(0)
	benchmarkPerUser(b, Descriptor{Op: OpCheck, Hits: &zero})
}
