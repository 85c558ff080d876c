package recvlimit

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/peer"
)

// TestLimiter: the oldest waiting stream is ended to make room, a late one
// is ended by expire, one whose message arrived is never ended, and the
// cause says which.
func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := New(2, 10*time.Second)
	l.now = func() time.Time { return now }
	tap := func() context.Context {
		ctx, err := l.Tap(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		return ctx
	}
	a, b := tap(), tap()
	l.Arrived(b)
	c := tap()
	d := tap() // three tapped, one arrived: a, the oldest waiting, makes room
	if !errors.Is(context.Cause(a), ErrEvicted) {
		t.Errorf("a: %v, want evicted", context.Cause(a))
	}
	if l.Waiting() != 2 {
		t.Errorf("waiting %d, want 2", l.Waiting())
	}
	now = now.Add(8 * time.Second) // c (tapped at 2s) has waited 10s, d 9s
	l.Expire()
	if !errors.Is(context.Cause(c), ErrTimeout) || d.Err() != nil || b.Err() != nil {
		t.Errorf("after 10s: c %v, d %v, b %v; want c timed out only", context.Cause(c), d.Err(), b.Err())
	}
	now = now.Add(time.Hour)
	l.Arrived(d)
	l.Expire()
	if d.Err() != nil || l.Waiting() != 0 {
		t.Errorf("d arrived then an hour: %v, %d waiting", d.Err(), l.Waiting())
	}
	if to, ev := l.Ended(); to != 1 || ev != 1 {
		t.Errorf("ended %d by timeout, %d evicted; want 1 and 1", to, ev)
	}
}

// TestLimiterEvictsFromTheBusiestConnection: the stream ended to make room
// is the oldest of the connection with the most streams waiting, not the
// oldest of all.
func TestLimiterEvictsFromTheBusiestConnection(t *testing.T) {
	l := New(3, time.Hour)
	conns := map[int]net.Addr{} // as grpc-go gives every stream of a connection the same address
	from := func(port int) context.Context {
		if conns[port] == nil {
			conns[port] = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
		}
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: conns[port]})
		ctx, _ = l.Tap(ctx, nil)
		return ctx
	}
	client := from(1) // a well-behaved client's call, waiting longest
	flood1, flood2 := from(2), from(2)
	from(2) // the fourth: the flood's connection has two waiting, the client's one
	if client.Err() != nil || !errors.Is(context.Cause(flood1), ErrEvicted) || flood2.Err() != nil {
		t.Errorf("client %v, flood %v %v; want the flood's oldest evicted", client.Err(), context.Cause(flood1), flood2.Err())
	}
}

// TestLimiterReportsEnded: WithEnded hears of every stream ended, by
// eviction or timeout, with its connection's address; not of one whose
// message arrived, nor of one of an unknown connection.
func TestLimiterReportsEnded(t *testing.T) {
	var ended []net.Addr
	now := time.Unix(0, 0)
	l := New(2, 10*time.Second, WithEnded(func(conn net.Addr) { ended = append(ended, conn) }))
	l.now = func() time.Time { return now }
	a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	b := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
	from := func(addr net.Addr) context.Context {
		ctx := context.Background()
		if addr != nil {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
		}
		ctx, _ = l.Tap(ctx, nil)
		return ctx
	}
	l.Arrived(from(b)) // arrived: never ended
	from(a)
	from(a)
	from(b) // evicts a's oldest
	if len(ended) != 1 || ended[0] != a {
		t.Fatalf("after an eviction: ended %v, want [%v]", ended, a)
	}
	from(nil) // evicts a's other
	now = now.Add(10 * time.Second)
	l.Expire() // b's and the unknown connection's time out
	if len(ended) != 3 || ended[1] != a || ended[2] != b {
		t.Errorf("ended %v, want [%v %v %v] (the unknown connection's not reported)", ended, a, a, b)
	}
}
