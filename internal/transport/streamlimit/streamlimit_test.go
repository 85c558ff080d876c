package streamlimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

const watch = "/grpc.health.v1.Health/Watch"

// conn is a connection of a caller: its remote address.
func conn(ip string, port uint16) net.Addr {
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), port))
}

// stream is a stream Tap admitted; end ends it as grpc-go would.
type stream struct {
	ctx context.Context
	end context.CancelFunc
}

// open taps a new stream of method on the connection, returning it, or the
// gRPC code it was refused with.
func open(t *testing.T, l *Limiter, method string, c net.Addr) (*stream, codes.Code) {
	t.Helper()
	base, end := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: c}))
	t.Cleanup(end)
	ctx, err := l.Tap(base, &tap.Info{FullMethodName: method})
	if err != nil {
		end()
		return nil, status.Code(err)
	}
	return &stream{ctx, end}, codes.OK
}

func mustOpen(t *testing.T, l *Limiter, c net.Addr) *stream {
	t.Helper()
	s, code := open(t, l, watch, c)
	if code != codes.OK {
		t.Fatalf("a stream on %v refused: %v", c, code)
	}
	return s
}

func TestBounds(t *testing.T) {
	a1, a2, a3 := conn("192.0.2.1", 1), conn("192.0.2.1", 2), conn("192.0.2.1", 3)
	b1 := conn("192.0.2.2", 1)
	t.Run("per connection", func(t *testing.T) {
		l := New(Bounds{Max: 100, PerCaller: 100, PerConn: 2}, watch)
		mustOpen(t, l, a1)
		mustOpen(t, l, a1)
		if _, code := open(t, l, watch, a1); code != codes.ResourceExhausted {
			t.Fatalf("a third stream on one connection: %v, want ResourceExhausted", code)
		}
		mustOpen(t, l, a2) // another connection of the same caller
		if c, _, _ := l.Refused(); c != 1 {
			t.Errorf("refused by connection: %d, want 1", c)
		}
	})
	t.Run("per caller, every connection together", func(t *testing.T) {
		l := New(Bounds{Max: 100, PerCaller: 2, PerConn: 100}, watch)
		mustOpen(t, l, a1)
		mustOpen(t, l, a2)
		if _, code := open(t, l, watch, a3); code != codes.ResourceExhausted {
			t.Fatalf("a third stream of one caller: %v, want ResourceExhausted", code)
		}
		mustOpen(t, l, b1) // another caller
		if _, c, _ := l.Refused(); c != 1 {
			t.Errorf("refused by caller: %d, want 1", c)
		}
	})
	t.Run("other methods pass", func(t *testing.T) {
		l := New(Bounds{Max: 1, PerCaller: 1, PerConn: 1}, watch)
		mustOpen(t, l, a1)
		for range 3 {
			if _, code := open(t, l, "/ratelimit.v1.RateLimitService/ShouldRateLimit", a1); code != codes.OK {
				t.Fatalf("a unary call refused: %v", code)
			}
		}
		if l.Held() != 1 {
			t.Errorf("held %d, want 1", l.Held())
		}
	})
}

// TestFullMakesRoomForTheSmallerCaller: with Max held, a caller holding
// fewer streams than the one holding the most gets a place, that caller's
// oldest stream ended; a caller holding the most is refused.
func TestFullMakesRoomForTheSmallerCaller(t *testing.T) {
	l := New(Bounds{Max: 3, PerCaller: 3, PerConn: 3}, watch)
	attacker := []*stream{mustOpen(t, l, conn("192.0.2.1", 1)), mustOpen(t, l, conn("192.0.2.1", 1)), mustOpen(t, l, conn("192.0.2.1", 2))}
	if _, code := open(t, l, watch, conn("192.0.2.1", 3)); code != codes.ResourceExhausted {
		t.Fatalf("the caller holding every stream opens one more: %v, want ResourceExhausted", code)
	}
	newcomer := mustOpen(t, l, conn("198.51.100.9", 1))
	if !errors.Is(context.Cause(attacker[0].ctx), ErrEvicted) {
		t.Fatalf("the attacker's oldest stream: cause %v, want ErrEvicted", context.Cause(attacker[0].ctx))
	}
	for _, s := range attacker[1:] {
		if s.ctx.Err() != nil {
			t.Fatal("a newer stream of the attacker was ended")
		}
	}
	// 2 against 1: the newcomer gets a second; a third would be refused (2 against 2).
	mustOpen(t, l, conn("198.51.100.9", 1))
	if _, code := open(t, l, watch, conn("198.51.100.9", 2)); code != codes.ResourceExhausted {
		t.Fatalf("the newcomer, holding as many as the most, opens one more: %v, want ResourceExhausted", code)
	}
	if l.Held() != 3 || l.Evicted() != 2 {
		t.Errorf("held %d, evicted %d; want 3 and 2", l.Held(), l.Evicted())
	}
	// A stream that ends frees its place.
	newcomer.end()
	wait.For(t, "the ended stream's place freed", func() bool { return l.Held() == 2 })
	mustOpen(t, l, conn("203.0.113.1", 1))
}

// TestEndedStreamsFreeTheirPlace: a stream is counted until its context
// ends, whichever way; an evicted one is not counted twice.
func TestEndedStreamsFreeTheirPlace(t *testing.T) {
	l := New(Bounds{Max: 2, PerCaller: 2, PerConn: 2}, watch)
	c := conn("192.0.2.1", 1)
	for range 100 {
		s := mustOpen(t, l, c)
		s.end()
		wait.For(t, "the ended stream's place freed", func() bool { return l.Held() == 0 })
	}
	old := mustOpen(t, l, c)
	mustOpen(t, l, c)
	mustOpen(t, l, conn("192.0.2.2", 1)) // evicts old
	old.end()
	wait.For(t, "the evicted stream's context to end", func() bool { return old.ctx.Err() != nil })
	if l.Held() != 2 {
		t.Fatalf("held %d after an evicted stream ended, want 2", l.Held())
	}
}

func TestInterceptorSaysWhy(t *testing.T) {
	l := New(Bounds{Max: 1, PerCaller: 1, PerConn: 1}, watch)
	s := mustOpen(t, l, conn("192.0.2.1", 1))
	mustOpen(t, l, conn("192.0.2.2", 1))
	err := l.StreamServerInterceptor()(nil, serverStream{ctx: s.ctx}, &grpc.StreamServerInfo{FullMethod: watch}, func(any, grpc.ServerStream) error {
		return status.Error(codes.Canceled, "Stream has ended.")
	})
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != ErrEvicted.Error() {
		t.Fatalf("an evicted stream ends with %v, want ResourceExhausted: %v", err, ErrEvicted)
	}
}

// serverStream is a grpc.ServerStream of which the interceptor reads
// only the context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }
