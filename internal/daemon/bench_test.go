package daemon_test

import (
	"context"
	"testing"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// BenchmarkGRPCCall is one ShouldRateLimit over a real loopback connection
// to a daemon with its default options (limits, taps, stats handlers,
// interceptors), with 16 calls in flight per core: ns/op is the CPU of a
// whole round trip, client included, on this machine.
func BenchmarkGRPCCall(b *testing.B) {
	d := daemontest.Start(b, "")
	client := rl.NewRateLimitServiceClient(d.Dial(b))
	r := req("default", desc("path", "/orders", "user", "alice"))
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.ShouldRateLimit(context.Background(), r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
