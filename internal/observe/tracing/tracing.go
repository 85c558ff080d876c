// Package tracing exports OpenTelemetry traces of rate-limit decisions
// over OTLP (gRPC or HTTP): a server span per decision call, a child of
// the caller's W3C trace context (the traceparent that Envoy forwards, in
// gRPC metadata or, on the HTTP API, an HTTP header), carrying the domain,
// the decision and the deciding rule; and, around a remote store, a client
// span per store call.
//
// A nil *Tracer is tracing off: the daemon then installs none of its
// hooks, and a decision costs exactly what it did without this package.
// With tracing on, a call that the sampler leaves out costs a non-recording
// span (BenchmarkSampledOut).
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/reminder"
)

// Attribute keys of the decision span.
const (
	AttrDomain     = attribute.Key("ratelimit.domain")
	AttrDecision   = attribute.Key("ratelimit.decision") // the overall code: allowed or denied
	AttrRule       = attribute.Key("ratelimit.rule")     // the deciding rule's metric key (its StatKey)
	AttrLimit      = attribute.Key("ratelimit.limit")    // the deciding limit's name, when it has one
	AttrRetryAfter = attribute.Key("ratelimit.retry_after_ms")
	AttrCharges    = attribute.Key("ratelimit.charges") // on the store span: the buckets charged
)

// scope names the instrumentation.
const scope = "github.com/ratelimitd/ratelimitd/internal/observe/tracing"

// Tracer makes the daemon's spans. It is safe for concurrent use.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	desc     string
	// followsParent: the sampler is parent-based, so that a call whose
	// caller did not sample its trace is not sampled either; the
	// interceptor then makes no span for it at all.
	followsParent bool
}

// New returns the Tracer that c and getenv's OpenTelemetry variables (see
// Config) configure, or nil when they leave tracing off. version is the
// service.version. Export failures are logged to log, the first at once
// and then at most one line a minute.
func New(c Config, getenv func(string) string, version string, log *slog.Logger) (*Tracer, error) {
	s, err := c.resolve(getenv)
	if err != nil || !s.on {
		return nil, err
	}
	ctx := context.Background()
	var exp *otlptrace.Exporter
	switch s.protocol {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if s.endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(s.endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if s.endpoint != "" {
			// As $OTEL_EXPORTER_OTLP_ENDPOINT: the signal's path appended.
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(s.endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", s.serviceName), attribute.String("service.version", version)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if s.sampleRatio.set {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.sampleRatio.v))))
	}
	failing := reminder.New(clock.NewMonotonic(), time.Minute)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if show, _, n := failing.Start(); show {
			log.Warn("traces: "+err.Error(), "errors", n)
		}
	}))
	p := sdktrace.NewTracerProvider(opts...)
	endpoint := s.endpoint
	if endpoint == "" {
		endpoint = "from the environment"
	}
	sampler := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))
	return &Tracer{
		provider:      p,
		tracer:        p.Tracer(scope),
		prop:          propagation.TraceContext{},
		desc:          "otlp " + s.protocol + " " + endpoint,
		followsParent: s.sampleRatio.set || sampler == "" || strings.HasPrefix(sampler, "parentbased_"),
	}, nil
}

// NewWithProvider returns a Tracer making its spans with p, for tests and
// benchmarks of the hooks; followsParent says that p's sampler is
// parent-based.
func NewWithProvider(p *sdktrace.TracerProvider, followsParent bool) *Tracer {
	return &Tracer{provider: p, tracer: p.Tracer(scope), prop: propagation.TraceContext{}, desc: "test", followsParent: followsParent}
}

// String says where the spans go, for the daemon's start line.
func (t *Tracer) String() string { return t.desc }

// Shutdown sends the spans not sent yet and stops the exporter, within
// ctx.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }
