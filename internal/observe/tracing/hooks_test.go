package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimitd/ratelimitd/internal/observe/tracing"
)

// TestUnsampledCaller: a caller's traceparent that does not sample its
// trace gets no span under a parent-based sampler (the interceptor makes
// none), and a span, child of the caller's, under a sampler that samples
// every trace whatever the caller said (OTEL_TRACES_SAMPLER=always_on).
// Calls of services not named pass through without a span.
func TestUnsampledCaller(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"))
	for _, tt := range []struct {
		name          string
		sampler       sdktrace.Sampler
		followsParent bool
		method        string
		want          int
	}{
		{"parent-based", sdktrace.ParentBased(sdktrace.AlwaysSample()), true, "/ratelimit.v1.RateLimitService/ShouldRateLimit", 0},
		{"always on", sdktrace.AlwaysSample(), false, "/ratelimit.v1.RateLimitService/ShouldRateLimit", 1},
		{"another service", sdktrace.AlwaysSample(), false, "/grpc.health.v1.Health/Check", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			p := sdktrace.NewTracerProvider(sdktrace.WithSampler(tt.sampler), sdktrace.WithSyncer(exp))
			intercept := tracing.NewWithProvider(p, tt.followsParent).UnaryServerInterceptor("ratelimit.v1.RateLimitService")
			intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tt.method}, func(context.Context, any) (any, error) { return nil, nil })
			spans := exp.GetSpans()
			if len(spans) != tt.want {
				t.Fatalf("%d spans, want %d", len(spans), tt.want)
			}
			if tt.want == 1 && spans[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("parent %s, want the caller's span", spans[0].Parent.SpanID())
			}
		})
	}
}
