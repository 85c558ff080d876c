package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// UnaryServerInterceptor starts a server span for each call of the named
// gRPC services (full names, as ratelimit.v1.RateLimitService), a child of
// the trace context in the call's traceparent metadata (an HTTP header, on
// the HTTP API), and ends it when the call returns: named after the
// method, with the call's gRPC status. Calls of other services pass
// through untouched; so do calls whose caller did not sample its trace,
// under a parent-based sampler (the default).
func (t *Tracer) UnaryServerInterceptor(services ...string) grpc.UnaryServerInterceptor {
	traced := make(map[string]bool, len(services))
	for _, s := range services {
		traced[s] = true
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		name := strings.TrimPrefix(info.FullMethod, "/")
		service, _, _ := strings.Cut(name, "/")
		if !traced[service] {
			return handler(ctx, req)
		}
		ctx = t.prop.Extract(ctx, incoming{ctx})
		if t.followsParent {
			// The caller did not sample its trace: neither would the
			// sampler. The caller's span context stays in ctx, not
			// recording, so the hooks below record nothing either.
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !sc.IsSampled() {
				return handler(ctx, req)
			}
		}
		ctx, span := t.tracer.Start(ctx, name, serverKind)
		resp, err := handler(ctx, req)
		if span.IsRecording() {
			code := status.Code(err)
			span.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service),
				attribute.Int("rpc.grpc.status_code", int(code)))
			if err != nil {
				span.SetStatus(codes.Error, status.Convert(err).Message())
			}
		}
		span.End()
		return resp, err
	}
}

// serverKind is made once: an option made per call is an allocation.
var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// Decided adds the engine's decision to the call's span, when it records:
// the domain, the overall decision, the deciding rule and limit
// (engine.Response.MostRestrictive's status; none when no limit binds)
// and, for a denial, the retry-after. The daemon's engine observer calls
// it.
func (t *Tracer) Decided(ctx context.Context, req *engine.Request, resp *engine.Response) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	decision := "allowed"
	if resp.Code != algorithms.Allowed {
		decision = "denied"
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, AttrDomain.String(req.Domain), AttrDecision.String(decision))
	if i := resp.MostRestrictive(); i >= 0 {
		st := &resp.Statuses[i]
		if st.Rule != nil {
			attrs = append(attrs, AttrRule.String(st.Rule.StatKey))
		}
		if st.Limit.Name != "" {
			attrs = append(attrs, AttrLimit.String(st.Limit.Name))
		}
	}
	if resp.Code != algorithms.Allowed && !resp.Never {
		attrs = append(attrs, AttrRetryAfter.Int64(resp.RetryAfter.Milliseconds()))
	}
	span.SetAttributes(attrs...)
}

// Store returns s with a client span, named "<system>.apply", around each
// Apply of a call whose span records: the wait for the store's answer
// (with Redis, the round trip of the batch the call's charges went in),
// with the number of charges, and the error should the store fail.
func (t *Tracer) Store(s store.Store, system string) store.Store {
	return tracedStore{Store: s, tracer: t.tracer, name: system + ".apply", system: attribute.String("db.system", system)}
}

type tracedStore struct {
	store.Store
	tracer trace.Tracer
	name   string
	system attribute.KeyValue
}

func (s tracedStore) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return s.Store.Apply(ctx, charges, decisions)
	}
	ctx, span := s.tracer.Start(ctx, s.name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(s.system, AttrCharges.Int(len(charges))))
	err := s.Store.Apply(ctx, charges, decisions)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

// incoming reads the trace context from the call's incoming gRPC
// metadata, one key at a time (metadata.FromIncomingContext would copy all
// of it).
type incoming struct{ ctx context.Context }

func (c incoming) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (incoming) Set(string, string) {}

func (c incoming) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
