package grpclimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/grpclimit"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// inFlightPolicy: 2 calls in flight at once, a unit never released freed
// a minute after it was taken.
const inFlightPolicy = `
domain: default
descriptors:
  - key: pool
    rate_limit: {name: in-flight, algorithm: concurrency, max_in_flight: 2, lease: 1m}
`

// leaseEnd is when the units taken at daemontest.T0 free themselves: a
// minute after the end of T0's 10s slot (lease/6), the slots aligned to
// the Unix epoch, as the algorithms package documents.
var leaseEnd = daemontest.T0.Truncate(10 * time.Second).Add(10*time.Second - 1 + time.Minute)

var apiPool = client.NewDescriptor("pool", "api")

// pooled is the health service behind NewConcurrency ([pool=api]) with a
// recovery interceptor in front (grpc-go does not recover panics). A unary
// call whose metadata says do=block waits for gate (or its context); one
// that says do=panic panics. Watch streams run until the caller ends them.
type pooled struct {
	daemon   *daemontest.Daemon
	client   *client.Client
	health   healthpb.HealthClient
	gate     chan struct{} // closed to let blocked calls return
	entered  chan struct{} // a handler started
	finished chan error    // the interceptors returned, with the call's error
	running  atomic.Int64
	peak     atomic.Int64
	lost     atomic.Int64 // releases that did not reach the service
	cutOff   atomic.Bool  // the client's calls fail while set
}

func startPooled(t *testing.T) *pooled {
	t.Helper()
	p := &pooled{
		daemon: daemontest.Start(t, inFlightPolicy),
		gate:   make(chan struct{}), entered: make(chan struct{}, 100), finished: make(chan error, 100),
	}
	c, err := client.New(p.daemon.GRPCAddr(),
		client.WithTimeout(10*time.Second),
		client.WithLogger(slog.New(slog.DiscardHandler)),
		client.WithReleaseFailureHook(func(error) { p.lost.Add(1) }),
		client.WithDialOptions(grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if p.cutOff.Load() {
					return status.Error(codes.Unavailable, "cut off")
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p.client = c

	limit := grpclimit.NewConcurrency(c, "default", func(context.Context, string, metadata.MD) []client.Descriptor {
		return []client.Descriptor{apiPool}
	})
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
				defer func() {
					if r := recover(); r != nil {
						err = status.Errorf(codes.Internal, "panic: %v", r)
					}
					p.finished <- err
				}()
				return h(ctx, req)
			},
			limit.Unary(),
			func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				defer p.enter()()
				md, _ := metadata.FromIncomingContext(ctx)
				switch do := md.Get("do"); {
				case len(do) == 1 && do[0] == "block":
					select {
					case <-p.gate:
					case <-ctx.Done():
						return nil, status.FromContextError(ctx.Err()).Err()
					}
				case len(do) == 1 && do[0] == "panic":
					panic("the handler failed")
				}
				return h(ctx, req)
			}),
		grpc.ChainStreamInterceptor(
			func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				err := h(srv, ss)
				p.finished <- err
				return err
			},
			limit.Stream(),
			func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				defer p.enter()()
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
	p.health = healthpb.NewHealthClient(conn)
	return p
}

// enter counts a handler in, and returns what counts it out.
func (p *pooled) enter() func() {
	n := p.running.Add(1)
	for old := p.peak.Load(); n > old && !p.peak.CompareAndSwap(old, n); old = p.peak.Load() {
	}
	p.entered <- struct{}{}
	return func() { p.running.Add(-1) }
}

// unary calls Health/Check, its metadata saying do.
func (p *pooled) unary(ctx context.Context, do string) error {
	_, err := p.health.Check(metadata.AppendToOutgoingContext(ctx, "do", do), &healthpb.HealthCheckRequest{})
	return err
}

// free returns how many units of [pool=api] are free, as the daemon counts
// them (a charge of 0 charges nothing).
func (p *pooled) free(t *testing.T) uint64 {
	t.Helper()
	l, err := p.client.Acquire(context.Background(), "default", apiPool.WithHits(0))
	if err != nil || l.Source != client.SourceService {
		t.Fatalf("peeking at the pool: %v, %v", l, err)
	}
	return l.Response.GetStatuses()[0].GetRemaining()
}

// wait receives from ch, failing the test if nothing comes in 10s (a hang,
// not a timing assertion).
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("still waiting for %s", what)
	}
	panic("unreachable")
}

// wantDenied checks that err is the in-flight denial, with RetryInfo.
func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	const msg = "throttled by policy 'in-flight'; retry after 70 s"
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != msg {
		t.Fatalf("%s: %v, want ResourceExhausted %q", what, err, msg)
	}
	if d, ok := retryDelay(err); !ok || d != leaseEnd.Sub(daemontest.T0) {
		t.Fatalf("%s: RetryInfo %v (%v), want %v", what, d, ok, leaseEnd.Sub(daemontest.T0))
	}
}

// TestConcurrencyUnary: of 5 slow calls at once under max_in_flight 2,
// exactly 2 run and 3 are denied at once; when the 2 end, their units are
// free again.
func TestConcurrencyUnary(t *testing.T) {
	p := startPooled(t)
	errs := make(chan error, 5)
	for range 5 {
		go func() { errs <- p.unary(context.Background(), "block") }()
	}
	for range 3 {
		wantDenied(t, "a call beyond the 2 in flight", wait(t, errs, "a denial"))
	}
	wait(t, p.entered, "the first handler")
	wait(t, p.entered, "the second handler")
	close(p.gate)
	for range 2 {
		if err := wait(t, errs, "an admitted call"); err != nil {
			t.Fatalf("an admitted call: %v", err)
		}
	}
	if n := p.peak.Load(); n != 2 {
		t.Fatalf("%d handlers ran at once, want 2", n)
	}
	if n := p.free(t); n != 2 {
		t.Fatalf("%d units free after both ended, want 2", n)
	}
}

// TestConcurrencyUnaryPanic: a handler that panics gives its unit back
// before the panic goes on.
func TestConcurrencyUnaryPanic(t *testing.T) {
	p := startPooled(t)
	for i := range 3 { // one more than max_in_flight: a leak would deny the third
		if err := p.unary(context.Background(), "panic"); status.Code(err) != codes.Internal {
			t.Fatalf("panic %d: %v, want the recovery's Internal", i, err)
		}
	}
	if n := p.free(t); n != 2 {
		t.Fatalf("%d units free after 3 panics, want 2", n)
	}
}

// TestConcurrencyUnaryCancel: a call its caller cancels gives its unit
// back once its handler returns, though its context has ended.
func TestConcurrencyUnaryCancel(t *testing.T) {
	p := startPooled(t)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- p.unary(ctx, "block") }()
	wait(t, p.entered, "the handler")
	cancel()
	if err := wait(t, errs, "the caller"); status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call: %v", err)
	}
	if err := wait(t, p.finished, "the interceptors to return"); status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call's handler: %v", err)
	}
	if n := p.free(t); n != 2 {
		t.Fatalf("%d units free after the cancelled call, want 2", n)
	}
}

// TestConcurrencyStream: a stream holds its unit until it ends, and a
// stream or call beyond max_in_flight is denied meanwhile.
func TestConcurrencyStream(t *testing.T) {
	p := startPooled(t)
	open := func() (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := p.health.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv() // the first message: the stream is in its handler
		}
		return cancel, err
	}
	var ends []context.CancelFunc
	for i := range 2 {
		end, err := open()
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		ends = append(ends, end)
	}
	end, err := open()
	end()
	wantDenied(t, "a third stream", err)
	wantDenied(t, "a call beside 2 streams", p.unary(context.Background(), ""))
	for range 2 { // the denials, ended before their callers heard
		wantDenied(t, "a denial's interceptors", wait(t, p.finished, "a denial"))
	}
	if n := p.free(t); n != 0 {
		t.Fatalf("%d units free with 2 streams open, want 0", n)
	}
	for i, end := range ends {
		end()
		if err := wait(t, p.finished, fmt.Sprintf("stream %d to end", i)); status.Code(err) != codes.Canceled {
			t.Fatalf("stream %d's handler: %v", i, err)
		}
		if n := p.free(t); n != uint64(i+1) {
			t.Fatalf("%d units free after %d streams ended, want %d", n, i+1, i+1)
		}
	}
}

// TestConcurrencyReleaseLost: a release that cannot reach the daemon does
// not change the call's answer; it is reported, and the unit frees itself
// at its lease's end, not a nanosecond sooner.
func TestConcurrencyReleaseLost(t *testing.T) {
	p := startPooled(t)
	errs := make(chan error, 1)
	go func() { errs <- p.unary(context.Background(), "block") }()
	wait(t, p.entered, "the handler")
	p.cutOff.Store(true)
	close(p.gate)
	if err := wait(t, errs, "the call"); err != nil {
		t.Fatalf("a call whose release was lost: %v", err)
	}
	wait(t, p.finished, "the interceptors to return")
	p.cutOff.Store(false)
	if n := p.lost.Load(); n != 1 {
		t.Fatalf("%d lost releases reported, want 1", n)
	}
	for _, step := range []struct {
		name string
		at   time.Time
		free uint64
	}{
		{"after the lost release", daemontest.T0.Add(time.Second), 1},
		{"1ns before the lease ends", leaseEnd.Add(-1), 1},
		{"at the lease's end", leaseEnd, 2},
	} {
		p.daemon.Clock.Set(step.at.UnixNano())
		if n := p.free(t); n != step.free {
			t.Fatalf("%s: %d units free, want %d", step.name, n, step.free)
		}
	}
}
