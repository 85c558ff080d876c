package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/engine"
)

func TestAsk(t *testing.T) {
	v1 := func(hits uint32, own ...*uint32) *ratelimitv1.ShouldRateLimitRequest {
		r := &ratelimitv1.ShouldRateLimitRequest{Domain: "shop", Hits: hits}
		for _, h := range own {
			r.Descriptors = append(r.Descriptors, &ratelimitv1.Descriptor{Hits: h})
		}
		return r
	}
	envoy := func(hits uint32, own ...*wrapperspb.UInt64Value) *rlsv3.RateLimitRequest {
		r := &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: hits}
		for _, h := range own {
			r.Descriptors = append(r.Descriptors, &rlcommon.RateLimitDescriptor{HitsAddend: h})
		}
		return r
	}
	zero, one := proto.Uint32(0), proto.Uint32(1)
	ezero, eone := wrapperspb.UInt64(0), wrapperspb.UInt64(1)
	tests := []struct {
		name string
		req  any
		want Access
	}{
		{"v1: no hits anywhere (1 each)", v1(0, nil), Charge},
		{"v1: every descriptor's hits 0", v1(0, zero, zero), Check},
		{"v1: every descriptor's 0 wins over the request's", v1(5, zero, zero), Check},
		{"v1: one descriptor charges", v1(0, zero, one), Charge},
		{"v1: one descriptor without hits of its own", v1(0, zero, nil), Charge},
		{"v1: no descriptors", v1(0), Charge},
		{"v1: checks charge nothing", func() any {
			r := v1(5, nil, one)
			for _, d := range r.Descriptors {
				d.Operation = ratelimitv1.Operation_OPERATION_CHECK
			}
			return r
		}(), Check},
		{"v1: a refund beside a check needs refund (not charge)", withOps(v1(0, zero, one), 0, ratelimitv1.Operation_OPERATION_REFUND), Refund},
		{"v1: a refund of 0 needs refund too", withOps(v1(0, zero), ratelimitv1.Operation_OPERATION_REFUND), Refund},
		{"v1: a refund beside a charge needs both", withOps(v1(3, nil, nil), 0, ratelimitv1.Operation_OPERATION_REFUND), Charge | Refund},
		{"v1: a charge that always overdraws charges", withOverdraft(v1(0, one), ratelimitv1.Overdraft_OVERDRAFT_ALWAYS), Charge},
		{"v1: a charge that never overdraws charges", withOverdraft(v1(0, one), ratelimitv1.Overdraft_OVERDRAFT_NEVER), Charge},
		{"envoy: Envoy's default (hits_addend 0 means 1)", envoy(0, nil), Charge},
		{"envoy: hits_addend 0 on every descriptor", envoy(0, ezero, ezero), Check},
		{"envoy: over the request's hits_addend", envoy(3, ezero), Check},
		{"envoy: one descriptor charges", envoy(0, ezero, eone), Charge},
		{"envoy: one descriptor without its own", envoy(0, ezero, nil), Charge},
		{"envoy: no descriptors", envoy(0), Charge},
		{"envoy: is_negative_hits needs refund", negative(envoy(0, eone), 0), Refund},
		{"envoy: is_negative_hits with hits_addend 0 too", negative(envoy(0, ezero), 0), Refund},
		{"envoy: is_negative_hits beside a check", negative(envoy(0, ezero, nil), 1), Refund},
		{"envoy: is_negative_hits beside a charge", negative(envoy(5, nil, nil), 1), Charge | Refund},
	}
	for _, tt := range tests {
		domain, access, ok := Ask(tt.req)
		if !ok || domain != "shop" || access != tt.want {
			t.Errorf("%s: Ask = %q, %v, %v; want shop, %v", tt.name, domain, access, ok, tt.want)
		}
	}
	if _, _, ok := Ask(&healthpb.HealthCheckRequest{}); ok {
		t.Error("Ask took a health check for a rate limit request")
	}
	u := func(v uint64) *uint64 { return &v }
	for _, tt := range []struct {
		req  engine.Request
		want Access
	}{
		{engine.Request{Descriptors: []engine.Descriptor{{}}}, Charge},
		{engine.Request{Hits: 4, Descriptors: []engine.Descriptor{{Hits: u(0)}, {Hits: u(0)}}}, Check},
		{engine.Request{Descriptors: []engine.Descriptor{{Hits: u(0)}, {Hits: u(2)}}}, Charge},
		{engine.Request{}, Charge},
		{engine.Request{Descriptors: []engine.Descriptor{{Op: engine.OpCheck, Hits: u(3)}}}, Check},
		{engine.Request{Descriptors: []engine.Descriptor{{Op: engine.OpRefund}, {Hits: u(0)}}}, Refund},
		{engine.Request{Descriptors: []engine.Descriptor{{Op: engine.OpRefund}, {Overdraft: engine.OverdraftAlways}}}, Charge | Refund},
		{engine.Request{Descriptors: []engine.Descriptor{{Overdraft: engine.OverdraftNever}}}, Charge},
	} {
		if got := AccessOf(&tt.req); got != tt.want {
			t.Errorf("AccessOf(%+v) = %v, want %v", tt.req, got, tt.want)
		}
	}
}

// withOps sets the operations of r's descriptors, in order (0 leaves one
// a charge).
func withOps(r *ratelimitv1.ShouldRateLimitRequest, ops ...ratelimitv1.Operation) *ratelimitv1.ShouldRateLimitRequest {
	for i, op := range ops {
		r.Descriptors[i].Operation = op
	}
	return r
}

// withOverdraft sets the overdraft of r's first descriptor.
func withOverdraft(r *ratelimitv1.ShouldRateLimitRequest, o ratelimitv1.Overdraft) *ratelimitv1.ShouldRateLimitRequest {
	r.Descriptors[0].Overdraft = o
	return r
}

// negative sets is_negative_hits on r's descriptors at these indexes.
func negative(r *rlsv3.RateLimitRequest, at ...int) *rlsv3.RateLimitRequest {
	for _, i := range at {
		r.Descriptors[i].IsNegativeHits = true
	}
	return r
}

// callCtx is the context of a gRPC call from a caller with this verified
// certificate (nil: plaintext) and authorization metadata.
func callCtx(cert *x509.Certificate, authorization ...string) context.Context {
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}}
	if cert != nil {
		p.AuthInfo = credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{cert},
			VerifiedChains:   [][]*x509.Certificate{{cert}},
		}}
	}
	ctx := peer.NewContext(context.Background(), p)
	md := metadata.MD{}
	for _, a := range authorization {
		md.Append("authorization", a)
	}
	return metadata.NewIncomingContext(ctx, md)
}

func TestInterceptor(t *testing.T) {
	a, err := New(writePolicy(t, semanticsPolicy, semanticsFiles))
	if err != nil {
		t.Fatal(err)
	}
	icp := a.UnaryServerInterceptor()
	shop := cert("", nil, "spiffe://example.org/ns/shop/sa/api")
	unverified := callCtx(nil)
	unverified = peer.NewContext(unverified, &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{shop}}}})
	charge := &ratelimitv1.ShouldRateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv1.Descriptor{{}}}
	tests := []struct {
		name   string
		ctx    context.Context
		method string
		req    any
		code   codes.Code
	}{
		{"a verified certificate", callCtx(shop), "/ratelimit.v1.RateLimitService/ShouldRateLimit", charge, codes.OK},
		{"a token in the metadata", callCtx(nil, "Bearer "+shopToken), "/ratelimit.v1.RateLimitService/ShouldRateLimit", charge, codes.OK},
		{"an unverified certificate identifies no one", unverified, "/ratelimit.v1.RateLimitService/ShouldRateLimit", charge, codes.Unauthenticated},
		{"outside the grants", callCtx(shop), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &rlsv3.RateLimitRequest{Domain: "billing"}, codes.PermissionDenied},
		{"health stays open", callCtx(nil), "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, codes.OK},
		{"an unknown method is closed", callCtx(shop), "/some.Service/Method", &healthpb.HealthCheckRequest{}, codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			_, err := icp(tt.ctx, tt.req, &grpc.UnaryServerInfo{FullMethod: tt.method}, func(context.Context, any) (any, error) {
				called = true
				return "ok", nil
			})
			if status.Code(err) != tt.code || called != (tt.code == codes.OK) {
				t.Fatalf("got %v (handler called: %v), want %v", err, called, tt.code)
			}
		})
	}
}

func TestFromHTTP(t *testing.T) {
	p, err := Load(writePolicy(t, semanticsPolicy, semanticsFiles))
	if err != nil {
		t.Fatal(err)
	}
	shop := cert("", nil, "spiffe://example.org/ns/shop/sa/api")
	r := httptest.NewRequest("POST", "https://ratelimitd/v1/check", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{shop}, VerifiedChains: [][]*x509.Certificate{{shop}}}
	if err := p.Authorize(FromHTTP(r), "shop", Charge); err != nil {
		t.Errorf("verified certificate: %v", err)
	}
	r.TLS.VerifiedChains = nil
	var e *Error
	if err := p.Authorize(FromHTTP(r), "shop", Charge); !errors.As(err, &e) || e.Reason != ReasonNoCredentials || e.Reason.HTTPStatus() != 401 {
		t.Errorf("unverified certificate: %v", err)
	}
	r.Header.Set("Authorization", "bearer "+reportsToken)
	if err := p.Authorize(FromHTTP(r), "shop", Check); err != nil {
		t.Errorf("token: %v", err)
	}
	if err := p.Authorize(FromHTTP(r), "shop", Charge); !errors.As(err, &e) || e.Reason.HTTPStatus() != 403 || strings.Contains(err.Error(), reportsToken) {
		t.Errorf("peek-only token charging: %v", err)
	}
}

// BenchmarkAuthorize is the cost authorization adds to a call: the
// interceptor's identity extraction and decision, for a caller identified
// by a URI SAN and one by a bearer token, against a policy of 1000
// clients.
func BenchmarkAuthorize(b *testing.B) {
	var policy strings.Builder
	policy.WriteString("clients:\n")
	for i := range 1000 {
		policy.WriteString("  - name: c" + strconv.Itoa(i) + "\n    match: [{uri: \"spiffe://example.org/ns/c" + strconv.Itoa(i) + "/sa/api\"}, {dns: c" + strconv.Itoa(i) + ".example}]\n    grants: [{domains: [d" + strconv.Itoa(i) + "], access: charge}]\n")
	}
	policy.WriteString(strings.TrimPrefix(semanticsPolicy, "\nclients:\n"))
	path := writePolicy(b, policy.String(), semanticsFiles)
	a, err := New(path)
	if err != nil {
		b.Fatal(err)
	}
	icp := a.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/ratelimit.v1.RateLimitService/ShouldRateLimit"}
	req := &ratelimitv1.ShouldRateLimitRequest{Domain: "shop", Descriptors: []*ratelimitv1.Descriptor{{}, {}, {}}}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{
		{"uri-san", callCtx(cert("shop-api", []string{"shop.internal"}, "spiffe://example.org/ns/shop/sa/api"))},
		{"bearer", callCtx(nil, "Bearer "+shopToken)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := icp(bc.ctx, req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
