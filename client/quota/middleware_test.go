package quota_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/grpclimit"
	"github.com/ratelimitd/ratelimitd/client/httplimit"
	"github.com/ratelimitd/ratelimitd/client/quota"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const closed = `
domain: shop
descriptors:
  - key: route
    value: checkout
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// quotaClient returns a quota client of a daemon whose route=checkout
// denies all, once its assignment (DENY_ALL) is in force.
func quotaClient(t *testing.T) *quota.Client {
	t.Helper()
	d := daemontest.Start(t, closed)
	q, err := quota.New(d.GRPCAddr(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	b := q.Bucket("route", "checkout")
	if !b.Allow(context.Background()) {
		t.Fatal("denied before any assignment: the default fallback allows")
	}
	wait.For(t, "DENY_ALL", func() bool { _, _, _, rule, _ := b.Assignment(); return rule == "DENY_ALL" })
	return q
}

func checkout() []client.Descriptor {
	return []client.Descriptor{client.NewDescriptor("route", "checkout")}
}

// TestHTTPMiddlewareWithQuota: httplimit decides locally with WithQuota:
// 429 naming the descriptor; requests it does not describe go through.
func TestHTTPMiddlewareWithQuota(t *testing.T) {
	q := quotaClient(t)
	m := httplimit.New(nil, "shop", func(r *http.Request) []client.Descriptor {
		if r.URL.Path == "/checkout" {
			return checkout()
		}
		return nil
	}, httplimit.WithQuota(q))
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })))
	defer srv.Close()
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/checkout", 429, "throttled by quota: route=checkout\n"},
		{"/other", 200, "ok"},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || string(body) != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.path, resp.StatusCode, body, tc.code, tc.body)
		}
	}
}

// TestGRPCInterceptorWithQuota: grpclimit decides locally with WithQuota:
// ResourceExhausted naming the descriptor.
func TestGRPCInterceptorWithQuota(t *testing.T) {
	q := quotaClient(t)
	i := grpclimit.New(nil, "shop", func(context.Context, string, metadata.MD) []client.Descriptor { return checkout() }, grpclimit.WithQuota(q))
	g := grpc.NewServer(grpc.UnaryInterceptor(i.Unary()))
	healthpb.RegisterHealthServer(g, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "throttled by quota: route=checkout" {
		t.Fatalf("got %v, want ResourceExhausted throttled by quota", err)
	}
}
