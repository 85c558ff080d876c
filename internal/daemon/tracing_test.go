package daemon_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/observe/tracing"
	"github.com/ratelimitd/ratelimitd/internal/observe/tracing/otlptest"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

const tracedPolicy = `
domain: traced
descriptors:
  - key: tenant
    rate_limit: {name: per-tenant, unit: hour, requests_per_unit: 1}
`

// Trace contexts of the callers: a trace id and the caller's span id.
const (
	traceV1    = "0af7651916cd43dd8448eb211c80319c"
	traceEnvoy = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceHTTP  = "5bf92f3577b34da6a3ce929d0e0e4737"
	traceOff   = "6bf92f3577b34da6a3ce929d0e0e4738"
	callerSpan = "b7ad6b7169203331"
)

func traceparent(trace string, sampled bool) string {
	flags := "00"
	if sampled {
		flags = "01"
	}
	return "00-" + trace + "-" + callerSpan + "-" + flags
}

// tracedCalls makes one decision on each API, each with its caller's
// traceparent: the v1 API (allowed), Envoy's (denied: the tenant's one
// request an hour is spent) and the HTTP API (denied), then one whose
// caller did not sample its trace.
func tracedCalls(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	conn := d.Dial(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent(traceV1, true))
	if r, err := rl.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req("traced", desc("tenant", "acme"))); err != nil || r.OverallCode != rl.Code_CODE_OK {
		t.Fatalf("v1: %v, %v; want allowed", r, err)
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent(traceEnvoy, true))
	envoyReq := &rlsv3.RateLimitRequest{Domain: "traced", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}}
	if r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, envoyReq); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("Envoy's API: %v, %v; want over limit", r, err)
	}
	hr, _ := http.NewRequest("POST", "http://"+d.HTTPAddr()+"/ratelimit.v1.RateLimitService/ShouldRateLimit",
		strings.NewReader(`{"domain": "traced", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}]}]}`))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Traceparent", traceparent(traceHTTP, true))
	resp, err := http.DefaultClient.Do(hr)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP API: %v, %v", resp, err)
	}
	resp.Body.Close()
	ctx = metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent(traceOff, false))
	if _, err := rl.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req("traced", desc("tenant", "other"))); err != nil {
		t.Fatal(err)
	}
}

// checkDecisionSpan checks the server span of a decision: in the caller's
// trace, a child of the caller's span, with the domain, the decision and
// the deciding rule.
func checkDecisionSpan(t *testing.T, spans []otlptest.Span, name, decision string) otlptest.Span {
	t.Helper()
	for _, s := range spans {
		if s.Kind != tracepb.Span_SPAN_KIND_SERVER {
			continue
		}
		want := map[string]string{
			string(tracing.AttrDomain): "traced", string(tracing.AttrDecision): decision,
			string(tracing.AttrRule): "traced.tenant", string(tracing.AttrLimit): "per-tenant",
		}
		for k, v := range want {
			if s.Attributes[k] != v {
				t.Errorf("%s span: %s=%q, want %q (attributes %v)", name, k, s.Attributes[k], v, s.Attributes)
			}
		}
		if s.Name != name || s.ParentSpanID != callerSpan || s.Resource["service.name"] != "ratelimitd" {
			t.Errorf("span %q, parent %s, service %q; want %q, a child of the caller's %s, service ratelimitd",
				s.Name, s.ParentSpanID, s.Resource["service.name"], name, callerSpan)
		}
		if decision == "denied" && s.Attributes[string(tracing.AttrRetryAfter)] == "" {
			t.Errorf("%s: a denial without %s", name, tracing.AttrRetryAfter)
		}
		return s
	}
	t.Fatalf("no server span among %+v", spans)
	return otlptest.Span{}
}

// TestTracesOverGRPC: with --otlp-endpoint over grpc, each decision on
// the v1 API, Envoy's and the HTTP API is a server span, a child of the
// caller's traceparent, carrying the domain, the decision and the
// deciding rule; a call whose caller did not sample its trace sends none.
// The memory store's work is no span of its own.
func TestTracesOverGRPC(t *testing.T) {
	col := otlptest.Start(t)
	d := daemontest.Start(t, tracedPolicy, func(c *daemon.Config) {
		c.Tracing = tracing.Config{Endpoint: col.GRPCURL, Protocol: tracing.ProtocolGRPC}
	})
	tracedCalls(t, d)
	d.Stop() // sends the spans not sent yet

	checkDecisionSpan(t, col.WaitFor(t, traceV1, 1), "ratelimit.v1.RateLimitService/ShouldRateLimit", "allowed")
	checkDecisionSpan(t, col.WaitFor(t, traceEnvoy, 1), "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "denied")
	checkDecisionSpan(t, col.WaitFor(t, traceHTTP, 1), "ratelimit.v1.RateLimitService/ShouldRateLimit", "denied")
	if n := len(col.Spans()); n != 3 {
		t.Errorf("%d spans, want 3 (none for the unsampled call, none for the memory store): %+v", n, col.Spans())
	}
	if !strings.Contains(d.Logs(), "traces=\"otlp grpc "+col.GRPCURL) {
		t.Errorf("the start line does not say where traces go: %s", d.Logs())
	}
}

// TestTracesOverHTTPWithRedis: over http/protobuf, switched on by the
// standard environment alone (OTEL_EXPORTER_OTLP_ENDPOINT, with
// OTEL_SERVICE_NAME), with the Redis store: each sampled decision's span
// has a client span child, the store's round trip.
func TestTracesOverHTTPWithRedis(t *testing.T) {
	col := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.HTTPURL)
	t.Setenv("OTEL_SERVICE_NAME", "edge-limits")
	srv := redistest.Start(t)
	d := daemontest.Start(t, tracedPolicy, withRedis(srv.Addr(), guard.FailClosed))
	tracedCalls(t, d)
	d.Stop()

	for _, trace := range []string{traceV1, traceEnvoy, traceHTTP} {
		spans := col.WaitFor(t, trace, 2)
		var server, client otlptest.Span
		for _, s := range spans {
			switch s.Kind {
			case tracepb.Span_SPAN_KIND_SERVER:
				server = s
			case tracepb.Span_SPAN_KIND_CLIENT:
				client = s
			}
		}
		if server.ParentSpanID != callerSpan || server.Resource["service.name"] != "edge-limits" {
			t.Errorf("trace %s: server span %+v; want a child of the caller, service edge-limits", trace, server)
		}
		if client.Name != "redis.apply" || client.ParentSpanID != server.SpanID || client.Attributes["db.system"] != "redis" || client.Attributes[string(tracing.AttrCharges)] != "1" {
			t.Errorf("trace %s: store span %+v; want redis.apply, a child of the server span %s, one charge", trace, client, server.SpanID)
		}
	}
	if n := len(col.Spans()); n != 6 {
		t.Errorf("%d spans, want 6: %+v", n, col.Spans())
	}
}

// TestTracesOff: without the flag or the environment, the daemon exports
// nothing and says traces=off.
func TestTracesOff(t *testing.T) {
	d := daemontest.Start(t, tracedPolicy)
	tracedCalls(t, d)
	if !strings.Contains(d.Logs(), "traces=off") {
		t.Errorf("start line without traces=off: %s", d.Logs())
	}
}
