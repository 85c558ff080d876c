// Package otlptest is an OpenTelemetry collector's trace receiver for
// tests: the OTLP trace service over gRPC and over HTTP (protobuf), on
// loopback, keeping every span it receives.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, its ids in hex as in a traceparent.
type Span struct {
	Name         string
	TraceID      string
	SpanID       string
	ParentSpanID string
	Kind         tracepb.Span_SpanKind
	Attributes   map[string]string // every value as its string form
	Resource     map[string]string
	StatusCode   tracepb.Status_StatusCode
}

// Receiver holds the spans received so far.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []Span
	// GRPCURL and HTTPURL are the endpoints to export to
	// (http://127.0.0.1:port), as --otlp-endpoint takes them.
	GRPCURL, HTTPURL string
}

// Start runs a receiver until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, r)
	go g.Serve(gl)
	t.Cleanup(g.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	h := &http.Server{Handler: mux}
	go h.Serve(hl)
	t.Cleanup(func() { h.Close() })
	r.GRPCURL, r.HTTPURL = "http://"+gl.Addr().String(), "http://"+hl.Addr().String()
	return r
}

// Export implements the OTLP trace service.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, hr *http.Request) {
	body, err := io.ReadAll(hr.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil || hr.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want an OTLP protobuf export", http.StatusBadRequest)
		return
	}
	r.add(&req)
	b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

func (r *Receiver) add(req *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{
					Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId), Kind: s.Kind,
					Attributes: attrs(s.Attributes), Resource: res, StatusCode: s.GetStatus().GetCode(),
				})
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.Value.(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(x.IntValue, 10)
		default:
			m[kv.Key] = v.GetStringValue()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor waits up to 10s until n spans of trace traceID have arrived and
// returns them, or fails the test.
func (r *Receiver) WaitFor(t testing.TB, traceID string, n int) []Span {
	t.Helper()
	var got []Span
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = got[:0]
		for _, s := range r.Spans() {
			if s.TraceID == traceID {
				got = append(got, s)
			}
		}
		if len(got) >= n {
			return got
		}
	}
	t.Fatalf("trace %s: %d spans within 10s, want %d: %+v", traceID, len(got), n, got)
	return nil
}
