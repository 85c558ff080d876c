package daemon_test

import (
	"context"
	"net"
	"strings"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// dialFrom returns a client of d's gRPC port whose connection comes from
// the local address ip: any address of 127.0.0.0/8 reaches a listener on
// 127.0.0.1, so each is a caller (a source) of its own. Each client is a
// connection of its own.
func dialFrom(t *testing.T, d *daemontest.Daemon, ip string) *grpc.ClientConn {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// watch opens a health Watch on conn and returns it with the error of its
// first answer (nil: it said SERVING).
func watch(t *testing.T, ctx context.Context, conn *grpc.ClientConn) (healthpb.Health_WatchClient, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, err
	}
	r, err := w.Recv()
	if err == nil && r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch says %v, want SERVING", r.GetStatus())
	}
	return w, err
}

// quotaStream opens an RLQS stream on conn and sends its first report, of
// domain default and no bucket; it returns the stream.
func quotaStream(t *testing.T, conn *grpc.ClientConn) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "default"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLongStreamsLockNobodyOut: connections each holding a long-lived
// stream (a health Watch) are not busy: with as many of them as the port
// holds, and more, a new client's connection is served (the one idle
// longest is closed to make room), its calls and its own Watch answered.
func TestLongStreamsLockNobodyOut(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) { c.Limits.MaxConnections = 4 })
	for range 6 {
		watch(t, context.Background(), dialFrom(t, d, "127.0.0.2")) // the attacker's; the last ones close its first
	}
	m := scrape(t, d)
	if busy := m[`ratelimitd_connections_busy{port="grpc"}`]; busy != 0 {
		t.Errorf("%v connections busy with Watch streams only, want 0", busy)
	}
	newcomer := dialFrom(t, d, "127.0.0.3")
	if _, err := rl.NewRateLimitServiceClient(newcomer).ShouldRateLimit(context.Background(), req("default", desc("path", "/orders"))); err != nil {
		t.Fatalf("a new client's call while connections hold Watch streams: %v", err)
	}
	if _, err := watch(t, context.Background(), newcomer); err != nil {
		t.Fatalf("a new client's Watch: %v", err)
	}
}

// TestLongStreamsBounded: long-lived streams (health Watch and RLQS count
// alike) are bounded per connection, per caller and in all; with the
// bound in all reached, a caller holding fewer streams than another gets
// a place, that caller's oldest stream ended with ResourceExhausted.
func TestLongStreamsBounded(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) {
		c.Limits.MaxLongStreams = 4
		c.Limits.MaxLongStreamsPerCaller = 3
		c.Limits.MaxLongStreamsPerConn = 2
	})
	ctx := context.Background()
	refused := func(what string, err error, bound string) {
		t.Helper()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), bound) {
			t.Fatalf("%s: %v, want ResourceExhausted naming %q", what, err, bound)
		}
	}
	a1, a2 := dialFrom(t, d, "127.0.0.2"), dialFrom(t, d, "127.0.0.2")
	oldest, err := watch(t, ctx, a1)
	if err != nil {
		t.Fatal(err)
	}
	quotaStream(t, a1)
	wait.For(t, "two streams held", func() bool { return scrape(t, d)[`ratelimitd_long_streams{port="grpc"}`] == 2 })
	_, err = watch(t, ctx, a1)
	refused("a third long-lived stream on one connection", err, "this connection holds 2")
	if _, err := watch(t, ctx, a2); err != nil {
		t.Fatalf("a stream on another connection of the caller: %v", err)
	}
	_, err = watch(t, ctx, dialFrom(t, d, "127.0.0.2"))
	refused("a fourth long-lived stream of one caller", err, "your address holds 3")

	b := dialFrom(t, d, "127.0.0.3")
	if _, err := watch(t, ctx, b); err != nil { // the fourth in all
		t.Fatalf("another caller's stream: %v", err)
	}
	// All 4 held: the newcomer's stream ends the oldest of the caller
	// holding the most (127.0.0.2: 3).
	if _, err := watch(t, ctx, dialFrom(t, d, "127.0.0.4")); err != nil {
		t.Fatalf("a newcomer's stream, every place held: %v", err)
	}
	_, err = oldest.Recv()
	refused("the oldest stream of the caller holding the most", err, "make room for another caller")
	// 127.0.0.3 holds 1, as many as the most but for 127.0.0.2's 2: its
	// second ends 127.0.0.2's oldest; its third is refused (2 against 2).
	if _, err := watch(t, ctx, b); err != nil {
		t.Fatalf("a second stream of a caller holding fewer than another: %v", err)
	}
	_, err = watch(t, ctx, dialFrom(t, d, "127.0.0.3"))
	refused("a stream of a caller holding the most, every place held", err, "no caller holds more than you")

	m := scrape(t, d)
	for series, want := range map[string]float64{
		`ratelimitd_long_streams{port="grpc"}`:                                  4,
		`ratelimitd_long_streams_refused_total{bound="connection",port="grpc"}`: 1,
		`ratelimitd_long_streams_refused_total{bound="caller",port="grpc"}`:     1,
		`ratelimitd_long_streams_refused_total{bound="all",port="grpc"}`:        1,
		`ratelimitd_long_streams_evicted_total{port="grpc"}`:                    2,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	// Unary calls are not long-lived: a connection full of streams still calls.
	if _, err := rl.NewRateLimitServiceClient(a1).ShouldRateLimit(ctx, req("default", desc("path", "/orders"))); err != nil {
		t.Fatalf("a call on a connection holding its most long-lived streams: %v", err)
	}
}

// TestAuthzHealthWatch: under an authorization policy, the health
// service's Check answers anyone (probes have no credentials), its Watch
// only callers the policy identifies.
func TestAuthzHealthWatch(t *testing.T) {
	d := startBillingWithAuthz(t)
	conn := d.Dial(t)
	if h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check without credentials: %v, %v", h, err)
	}
	_, err := watch(t, context.Background(), conn)
	wantRefused(t, err, codes.Unauthenticated, "no client certificate or bearer token")
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+batchToken)
	if _, err := watch(t, ctx, conn); err != nil {
		t.Fatalf("Watch with the batch token: %v", err)
	}
}
