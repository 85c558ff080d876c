package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/tracing"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

type nopStore struct{}

func (nopStore) Apply(context.Context, []store.Charge, []algorithms.Decision) error { return nil }

// call runs what tracing adds to one decision call: the interceptor, the
// engine's hook and the store wrapper around a store that does nothing.
func call(b *testing.B, tr *tracing.Tracer, ctx context.Context) {
	intercept := tr.UnaryServerInterceptor("ratelimit.v1.RateLimitService")
	st := tr.Store(nopStore{}, "redis")
	info := &grpc.UnaryServerInfo{FullMethod: "/ratelimit.v1.RateLimitService/ShouldRateLimit"}
	req := &engine.Request{Domain: "shop"}
	resp := &engine.Response{Statuses: []engine.Status{{Matched: true, Rule: &config.Rule{StatKey: "shop.tenant"}, Limit: &config.Limit{Name: "per-tenant"}}}}
	handler := func(ctx context.Context, _ any) (any, error) {
		st.Apply(ctx, nil, nil)
		tr.Decided(ctx, req, resp)
		return nil, nil
	}
	b.ReportAllocs()
	for b.Loop() {
		intercept(ctx, nil, info, handler)
	}
}

// BenchmarkSampledOut: a call whose caller's traceparent says not sampled
// (Envoy forwarding an unsampled trace), under the default parent-based
// sampler.
func BenchmarkSampledOut(b *testing.B) {
	p := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"))
	call(b, tracing.NewWithProvider(p, true), ctx)
}

// BenchmarkSampledOutByRatio: a call without a traceparent that a ratio
// sampler of 0 leaves out.
func BenchmarkSampledOutByRatio(b *testing.B) {
	p := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))), sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	call(b, tracing.NewWithProvider(p, true), context.Background())
}

// BenchmarkSampled: a sampled call, its two spans recorded (exported to
// memory), for comparison.
func BenchmarkSampled(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	b.Cleanup(func() { p.Shutdown(context.Background()) })
	call(b, tracing.NewWithProvider(p, true), context.Background())
}
