// Package connlimit bounds the connections a server holds open on one
// listener, making room for a new caller by closing an idle connection
// rather than locking new callers out.
//
// A Listener holds at most Max connections. A connection is busy while
// the server works on a request of it (Busy and Done bracket each one: the
// HTTP server's ConnState hook, or the gRPC server's interceptors, call
// them) and idle otherwise, from the moment it is accepted; a long-lived
// gRPC stream, such as a health Watch, does not make it busy. When a
// connection arrives with Max open, the one that has been idle longest is
// closed to make room; when none is idle, the new connection is closed at
// once. Callers that keep connections open without using them can thus
// never lock out a caller with a request to make; callers that keep Max
// connections busy can, for as long as the server's own timeouts let them
// (time to send a request, a message, a body).
package connlimit

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// Listener is a net.Listener holding at most Max connections open. Its
// zero value is not usable: call New.
type Listener struct {
	net.Listener
	max int

	mu     sync.Mutex
	open   map[*Conn]struct{}
	byAddr map[net.Addr]*Conn // by remote address (the very value its RemoteAddr returns), for the interceptors

	evicted atomic.Uint64
	refused atomic.Uint64
}

// New returns l holding at most max connections open (at least 1).
func New(l net.Listener, max int) *Listener {
	return &Listener{Listener: l, max: max, open: map[*Conn]struct{}{}, byAddr: map[net.Addr]*Conn{}}
}

// Conn is a connection a Listener accepted.
type Conn struct {
	net.Conn
	l         *Listener
	busy      int       // requests in progress; under l.mu
	idleSince time.Time // when busy last became 0; under l.mu
	gone      bool      // closed or evicted; under l.mu
}

// Accept waits for a connection that it can hold: with Max open, it closes
// the connection idle longest to make room, or, when every one is busy,
// closes the new connection and waits for the next.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &Conn{Conn: nc, l: l, idleSince: time.Now()}
		l.mu.Lock()
		var victim *Conn
		if len(l.open) >= l.max {
			if victim = l.idlest(); victim == nil {
				l.mu.Unlock()
				l.refused.Add(1)
				nc.Close()
				continue
			}
			l.forget(victim)
		}
		l.open[c] = struct{}{}
		l.byAddr[nc.RemoteAddr()] = c
		l.mu.Unlock()
		if victim != nil {
			l.evicted.Add(1)
			victim.Conn.Close()
		}
		return c, nil
	}
}

// idlest returns the open connection idle longest, or nil when every one
// is busy. Under l.mu.
func (l *Listener) idlest() *Conn {
	var best *Conn
	for c := range l.open {
		if c.busy == 0 && (best == nil || c.idleSince.Before(best.idleSince)) {
			best = c
		}
	}
	return best
}

// forget removes c from the open connections. Under l.mu.
func (l *Listener) forget(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	delete(l.open, c)
	if k := c.RemoteAddr(); l.byAddr[k] == c {
		delete(l.byAddr, k)
	}
}

// Open returns how many connections are open, and how many of them are
// busy.
func (l *Listener) Open() (open, busy int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.open {
		if c.busy > 0 {
			busy++
		}
	}
	return len(l.open), busy
}

// Evicted returns how many idle connections were closed to make room.
func (l *Listener) Evicted() uint64 { return l.evicted.Load() }

// Refused returns how many connections were closed on arrival, every open
// one being busy.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Close closes the connection and frees its place.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.l.forget(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// Busy marks the start of a request on c: c is not idle until every
// request started is Done.
func (c *Conn) Busy() {
	c.l.mu.Lock()
	c.busy++
	c.l.mu.Unlock()
}

// Done marks the end of a request Busy started.
func (c *Conn) Done() {
	c.l.mu.Lock()
	if c.busy--; c.busy == 0 {
		c.idleSince = time.Now()
	}
	c.l.mu.Unlock()
}

// ConnState is an http.Server's ConnState hook for connections l accepted:
// a connection is busy from the first byte of a request until its response
// is written (http.StateActive to http.StateIdle).
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*Conn)
	if !ok || c.l != l {
		return
	}
	switch s {
	case http.StateActive:
		c.Busy()
	case http.StateIdle:
		c.Done()
	}
}

// UnaryServerInterceptor and StreamServerInterceptor make a gRPC server
// serving l mark a connection busy while a call of it runs its handler.
// A call still waiting for its message does not make its connection busy
// (internal/transport/recvlimit bounds those): a connection whose calls never get
// as far as a handler is as idle as one without calls, and is the first
// closed to make room.
func (l *Listener) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if c := l.conn(ctx); c != nil {
			c.Busy()
			defer c.Done()
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor: see UnaryServerInterceptor; but a stream of a
// method longLived names (one that lasts as long as its client wants: a
// health Watch, a quota stream) never makes its connection busy, so that
// holding such streams cannot lock new callers out. A connection whose
// only calls are long-lived streams is idle, and may be closed to make
// room; its streams end with it. (Bound those streams apart:
// internal/transport/streamlimit.)
func (l *Listener) StreamServerInterceptor(longLived func(fullMethod string) bool) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if longLived(info.FullMethod) {
			return handler(srv, ss)
		}
		if c := l.conn(ss.Context()); c != nil {
			c.Busy()
			defer c.Done()
		}
		return handler(srv, ss)
	}
}

// conn returns the connection of a gRPC call's context, or nil.
func (l *Listener) conn(ctx context.Context) *Conn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byAddr[p.Addr] // the connection's own RemoteAddr: grpc-go's peer, TLS or not
}
