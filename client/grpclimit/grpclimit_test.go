package grpclimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/grpclimit"
	"github.com/ratelimitd/ratelimitd/client/internal/fakeclock"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// app is a gRPC service (the standard health service) behind the
// interceptors, a daemon serving daemontest.SmallTiers, and a client of
// the service.
type app struct {
	daemon *daemontest.Daemon
	clock  *fakeclock.Clock
	health healthpb.HealthClient
	served atomic.Int64 // handler runs, unary and stream
}

var tiers = grpclimit.Tiers(
	grpclimit.Global(),
	grpclimit.PerMethod(),
	grpclimit.PerUserPerMethod(grpclimit.FirstOf(grpclimit.Metadata("authorization"), grpclimit.PeerAddr())),
)

func start(t *testing.T, describe grpclimit.DescribeFunc, clientOpts ...client.Option) *app {
	t.Helper()
	a := &app{daemon: daemontest.Start(t, daemontest.SmallTiers), clock: fakeclock.New(daemontest.T0)}
	opts := append([]client.Option{
		client.WithTimeout(10 * time.Second),
		client.WithLogger(slog.New(slog.DiscardHandler)),
		client.WithClock(a.clock),
	}, clientOpts...)
	c, err := client.New(a.daemon.GRPCAddr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	limit := grpclimit.New(c, "default", describe)
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limit.Unary(), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			a.served.Add(1)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(limit.Stream(), func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			a.served.Add(1)
			return h(srv, ss)
		}),
	)
	healthpb.RegisterHealthServer(s, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	a.health = healthpb.NewHealthClient(conn)
	return a
}

func as(user string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", user)
}

// unary calls Health/Check as user.
func (a *app) unary(user string) error {
	_, err := a.health.Check(as(user), &healthpb.HealthCheckRequest{})
	return err
}

// stream opens Health/Watch as user and returns the error of its first
// message (nil when one arrives).
func (a *app) stream(user string) error {
	ctx, cancel := context.WithCancel(as(user))
	defer cancel()
	w, err := a.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = w.Recv()
	return err
}

// retryDelay reads the RetryInfo detail of err, as any gRPC client can.
func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

func TestDenialsCarryRetryInfo(t *testing.T) {
	for _, kind := range []struct {
		name string
		call func(a *app, user string) error
	}{{"unary", (*app).unary}, {"stream", (*app).stream}} {
		t.Run(kind.name, func(t *testing.T) {
			a := start(t, tiers)
			steps := []struct {
				name       string
				user       string
				daemonTime time.Duration
				wantCode   codes.Code
				wantMsg    string
				wantRetry  time.Duration // with wantCode ResourceExhausted
			}{
				{"alice's first", "alice", 0, codes.OK, "", 0},
				{"alice's second", "alice", 0, codes.OK, "", 0},
				{"alice's third", "alice", 0, codes.ResourceExhausted, "throttled by policy 'per-user-per-endpoint'; retry after 120 ms", 120 * time.Millisecond},
				{"bob", "bob", 0, codes.OK, "", 0},
				{"no authorization: by peer address", "", 0, codes.OK, "", 0},
				{"alice 100ms on", "alice", 100 * time.Millisecond, codes.ResourceExhausted, "throttled by policy 'per-user-per-endpoint'; retry after 20 ms", 20 * time.Millisecond},
				{"alice at 120ms", "alice", 20 * time.Millisecond, codes.OK, "", 0},
			}
			served := int64(0)
			for _, st := range steps {
				a.daemon.Clock.Advance(st.daemonTime)
				err := kind.call(a, st.user)
				s := status.Convert(err)
				if s.Code() != st.wantCode || (st.wantMsg != "" && s.Message() != st.wantMsg) {
					t.Errorf("%s: %v %q, want %v %q", st.name, s.Code(), s.Message(), st.wantCode, st.wantMsg)
				}
				if st.wantCode == codes.OK {
					served++
					continue
				}
				if got, ok := retryDelay(err); !ok || got != st.wantRetry {
					t.Errorf("%s: RetryInfo %v (present %v), want %v", st.name, got, ok, st.wantRetry)
				}
			}
			if n := a.served.Load(); n != served {
				t.Errorf("handler ran %d times, want %d", n, served)
			}
		})
	}
}

func TestOverCapacityHasNoRetryInfo(t *testing.T) {
	export := func(context.Context, string, metadata.MD) []client.Descriptor {
		return []client.Descriptor{client.NewDescriptor("export", "all").WithHits(3)}
	}
	a := start(t, export)
	err := a.unary("alice")
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted ||
		s.Message() != "throttled by policy 'exports'; the request costs more than the limit's capacity, so no wait will admit it" {
		t.Errorf("got %v %q", s.Code(), s.Message())
	}
	if _, ok := retryDelay(err); ok {
		t.Error("RetryInfo on a call no wait would admit")
	}
}

func TestFailurePolicyWithTheDaemonStopped(t *testing.T) {
	tests := []struct {
		name      string
		opts      []client.Option
		wantCode  codes.Code
		wantMsg   string
		wantRetry time.Duration
	}{
		{"fail open", nil, codes.OK, "", 0},
		{"fail closed", []client.Option{client.WithFailClosed(3 * time.Second)}, codes.Unavailable,
			"rate limit service unavailable, failing closed; retry after 3 s", 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := start(t, tiers, tt.opts...)
			a.daemon.Stop()
			for _, call := range []func(*app, string) error{(*app).unary, (*app).stream} {
				err := call(a, "alice")
				if s := status.Convert(err); s.Code() != tt.wantCode || s.Message() != tt.wantMsg {
					t.Errorf("got %v %q, want %v %q", s.Code(), s.Message(), tt.wantCode, tt.wantMsg)
				}
				if got, _ := retryDelay(err); got != tt.wantRetry {
					t.Errorf("RetryInfo %v, want %v", got, tt.wantRetry)
				}
			}
		})
	}
}

func TestQueueDelayIsWaitedBeforeTheHandler(t *testing.T) {
	billing := func(context.Context, string, metadata.MD) []client.Descriptor {
		return []client.Descriptor{client.NewDescriptor("queue", "billing")}
	}
	a := start(t, billing)
	if err := a.unary("alice"); err != nil {
		t.Fatalf("first: %v", err)
	}
	second := make(chan error, 1)
	go func() { second <- a.unary("alice") }()
	if !a.clock.WaitForTimers(1, t.Context().Done()) {
		t.Fatal("no wait")
	}
	a.clock.Advance(100*time.Millisecond - 1)
	if n := a.served.Load(); n != 1 {
		t.Fatalf("handler ran %d times 1ns before the delay ended", n)
	}
	a.clock.Advance(1)
	if err := <-second; err != nil {
		t.Fatalf("second: %v", err)
	}

	// A call whose deadline passes while queued ends with it, unserved.
	third := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := a.health.Check(ctx, &healthpb.HealthCheckRequest{})
		third <- err
	}()
	if !a.clock.WaitForTimers(1, t.Context().Done()) {
		t.Fatal("no wait")
	}
	cancel()
	if err := <-third; status.Code(err) != codes.Canceled {
		t.Fatalf("third: %v, want Canceled", err)
	}
	if n := a.served.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func TestDescribe(t *testing.T) {
	user := grpclimit.FirstOf(grpclimit.Metadata("authorization"), grpclimit.PeerAddr())
	withPeer := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4321}})
	tests := []struct {
		name     string
		describe grpclimit.DescribeFunc
		ctx      context.Context
		md       metadata.MD
		want     []string
	}{
		{"global", grpclimit.Global(), withPeer, nil, []string{"generic_key=global"}},
		{"per method", grpclimit.PerMethod(), withPeer, nil, []string{"path=/shop.v1.Orders/List"}},
		{"user by metadata digest", grpclimit.PerUserPerMethod(grpclimit.Metadata("authorization")), withPeer,
			metadata.Pairs("authorization", "Bearer alice"), []string{"path=/shop.v1.Orders/List, user=" + digest("Bearer alice")}},
		{"no metadata: the tier is left out", grpclimit.PerUserPerMethod(grpclimit.Metadata("authorization")), withPeer, nil, nil},
		{"user by peer", grpclimit.PerUserPerMethod(grpclimit.PeerAddr()), withPeer, nil, []string{"path=/shop.v1.Orders/List, user=192.0.2.1"}},
		{"no peer", grpclimit.PerUserPerMethod(grpclimit.PeerAddr()), context.Background(), nil, nil},
		{"first of: metadata", grpclimit.PerUserPerMethod(user), withPeer, metadata.Pairs("authorization", "k"),
			[]string{"path=/shop.v1.Orders/List, user=" + digest("k")}},
		{"first of: peer", grpclimit.PerUserPerMethod(user), withPeer, nil, []string{"path=/shop.v1.Orders/List, user=192.0.2.1"}},
		{"tiers in order", tiers, withPeer, nil,
			[]string{"generic_key=global", "path=/shop.v1.Orders/List", "path=/shop.v1.Orders/List, user=192.0.2.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range tt.describe(tt.ctx, "/shop.v1.Orders/List", tt.md) {
				got = append(got, d.String())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("descriptor %d: %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func digest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}
