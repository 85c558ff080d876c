package grpcdecode_test

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcdecode"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcdecode/grpcdecodetest"
)

// TestUndecodableRequests runs the health service behind a Decoder on
// loopback, with an interceptor before it that records each call's code,
// and sends it bytes that do not decode.
func TestUndecodableRequests(t *testing.T) {
	dec := grpcdecode.New()
	var seen atomic.Value // the code the outer interceptor saw last
	var handled atomic.Int64
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		seen.Store(status.Code(err))
		return resp, err
	}
	inner := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		handled.Add(1)
		return h(ctx, req)
	}
	srv := grpc.NewServer(dec.ServerOption(),
		grpc.ChainUnaryInterceptor(outer, dec.UnaryServerInterceptor(), inner),
		grpc.ChainStreamInterceptor(dec.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	tests := []struct {
		name string
		body []byte
		code codes.Code
		msg  string
	}{
		{"valid", grpcdecodetest.Marshal(t, &healthpb.HealthCheckRequest{Service: ""}), codes.OK, ""},
		{"invalid UTF-8", grpcdecodetest.NotUTF8(t, &healthpb.HealthCheckRequest{Service: "zz"}, "zz"), codes.InvalidArgument,
			"request grpc.health.v1.HealthCheckRequest: service: invalid UTF-8"},
		{"truncated", []byte{0x0a, 0x05, 'a'}, codes.InvalidArgument,
			"request grpc.health.v1.HealthCheckRequest: cannot decode: "},
		{"a field number 0", []byte{0x00, 0x01}, codes.InvalidArgument,
			"request grpc.health.v1.HealthCheckRequest: cannot decode: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := handled.Load()
			var out []byte
			err := conn.Invoke(ctx, "/grpc.health.v1.Health/Check", tt.body, &out, grpc.ForceCodecV2(grpcdecodetest.Raw{}))
			st := status.Convert(err)
			if st.Code() != tt.code || !bytes.HasPrefix([]byte(st.Message()), []byte(tt.msg)) {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
			if got := seen.Load(); got != tt.code {
				t.Errorf("the interceptor before saw %v, want %v", got, tt.code)
			}
			if tt.code != codes.OK && handled.Load() != before {
				t.Error("an undecodable request reached the interceptors after the Decoder")
			}
		})
	}

	// A stream: Watch's request is received through RecvMsg.
	s, err := conn.NewStream(ctx, &healthpb.Health_ServiceDesc.Streams[0], "/grpc.health.v1.Health/Watch", grpc.ForceCodecV2(grpcdecodetest.Raw{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(grpcdecodetest.NotUTF8(t, &healthpb.HealthCheckRequest{Service: "zz"}, "zz")); err != nil {
		t.Fatal(err)
	}
	s.CloseSend()
	var out []byte
	err = s.RecvMsg(&out)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "request grpc.health.v1.HealthCheckRequest: service: invalid UTF-8" {
		t.Errorf("Watch: %v", err)
	}
}

// TestInvalidUTF8Path: the field is named by its path, repeated fields by
// their index among their field's occurrences.
func TestInvalidUTF8Path(t *testing.T) {
	entries := func(kv ...string) *ratelimitv1.Descriptor {
		d := &ratelimitv1.Descriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv1.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	tests := []struct {
		msg    *ratelimitv1.ShouldRateLimitRequest
		marker string
		want   string
	}{
		{&ratelimitv1.ShouldRateLimitRequest{Domain: "@@"}, "@@", "domain"},
		{&ratelimitv1.ShouldRateLimitRequest{Domain: "d", Descriptors: []*ratelimitv1.Descriptor{entries("a", "b"), entries("c", "d", "e", "@@")}}, "@@",
			"descriptors[1].entries[1].value"},
		{&ratelimitv1.ShouldRateLimitRequest{Domain: "d", Descriptors: []*ratelimitv1.Descriptor{{
			Entries: []*ratelimitv1.Entry{{Key: "k", Value: "v"}}, Limit: &ratelimitv1.Limit{Name: "@@"}}}}, "@@",
			"descriptors[0].limit.name"},
	}
	for _, tt := range tests {
		got := grpcdecode.InvalidUTF8(tt.msg, grpcdecodetest.NotUTF8(t, tt.msg, tt.marker))
		if got != tt.want {
			t.Errorf("%v: %q, want %q", tt.msg, got, tt.want)
		}
	}
}

// BenchmarkWellFormed is the cost of decoding a well-formed request
// through the Decoder (its codec and its interceptor), against grpc-go's
// proto codec alone (baseline): the difference is what the Decoder adds.
func BenchmarkWellFormed(b *testing.B) {
	dec := grpcdecode.New()
	in := grpcdecodetest.Marshal(b, &ratelimitv1.ShouldRateLimitRequest{Domain: "default", Descriptors: []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "path", Value: "/orders"}, {Key: "user", Value: "alice"}}}}})
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, bb := range []struct {
		name        string
		codec       encoding.CodecV2
		interceptor grpc.UnaryServerInterceptor
	}{
		{"baseline", encoding.GetCodecV2("proto"), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}},
		{"decoder", dec.Codec(), dec.UnaryServerInterceptor()},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m := new(ratelimitv1.ShouldRateLimitRequest)
				if err := bb.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(in)}, m); err != nil {
					b.Fatal(err)
				}
				if _, err := bb.interceptor(context.Background(), m, nil, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
