// Package streamlimit bounds the long-lived gRPC streams a server holds:
// streams that last as long as their client wants, such as the health
// service's Watch, Envoy's quota stream (RLQS) or server reflection.
//
// A Limiter knows these streams by their methods and bounds them three
// ways: per connection (PerConn), per caller (PerCaller, every connection
// of one source together: internal/transport/source) and in all (Max). Its Tap
// decides on a stream's headers, before a handler starts or a message is
// read:
//
//   - a stream beyond PerConn on its connection, or beyond PerCaller of its
//     caller, is refused (ResourceExhausted, naming the bound);
//   - with Max held, the oldest stream of the caller holding the most is
//     ended (its context cancelled with ErrEvicted) to make room, when that
//     caller holds more than the new stream's caller does; otherwise the new
//     stream is refused.
//
// So a caller holds at most PerCaller streams, the server at most Max, and a
// caller holding fewer streams than another always gets one: callers that
// hold streams cannot lock a new caller out. Other methods pass untouched.
//
// A stream is counted from the moment Tap admits it until its context ends:
// grpc-go ends a stream's context when the stream ends, however it ends
// (its handler returned, the client cancelled, the connection closed).
//
// Install Tap among the server's grpc.InTapHandle taps, after every tap
// that may refuse a stream (grpc-go never ends the context of a stream a
// tap refused, so a stream a later tap refused would stay counted), and
// StreamServerInterceptor in the stream chain, so that a stream ended to
// make room tells its client why.
package streamlimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/ratelimitd/ratelimitd/internal/transport/source"
)

// ErrEvicted is the cause of a stream's context ended to make room for a
// caller holding fewer streams.
var ErrEvicted = errors.New("streamlimit: the server holds the most long-lived streams it may; this one, of the caller holding the most, was ended to make room for another caller's")

// Bounds are a Limiter's bounds; each at least 1.
type Bounds struct {
	Max       int // streams held in all
	PerCaller int // streams one caller (source) holds, every connection together
	PerConn   int // streams one connection holds
}

// Limiter bounds the long-lived streams of a server. Its zero value is not
// usable: call New. It is safe for concurrent use.
type Limiter struct {
	b       Bounds
	methods map[string]bool

	mu      sync.Mutex
	n       int
	seq     uint64                       // admissions so far: an entry's age
	callers map[netip.Prefix]*callerList // streams held, by caller
	perConn map[net.Addr]int             // streams held, by connection (its remote address)

	refusedConn, refusedCaller, refusedFull, evicted atomic.Uint64
}

// callerList is a caller's streams, oldest first.
type callerList struct {
	first, last *entry
	n           int
}

// entry is a stream held.
type entry struct {
	seq        uint64
	caller     netip.Prefix
	conn       net.Addr
	cancel     context.CancelCauseFunc
	prev, next *entry // in the caller's list; under Limiter.mu
	held       bool   // counted; under Limiter.mu
}

// New returns a Limiter of the long-lived streams of the methods (full
// method names, "/package.Service/Method"), within b (a bound below 1 is
// taken as 1).
func New(b Bounds, methods ...string) *Limiter {
	b.Max, b.PerCaller, b.PerConn = max(b.Max, 1), max(b.PerCaller, 1), max(b.PerConn, 1)
	l := &Limiter{b: b, methods: map[string]bool{}, callers: map[netip.Prefix]*callerList{}, perConn: map[net.Addr]int{}}
	l.Add(methods...)
	return l
}

// Add makes the streams of the methods (full method names) among those l
// bounds. Call it before the server serves: it must not run concurrently
// with Tap.
func (l *Limiter) Add(methods ...string) {
	for _, m := range methods {
		l.methods[m] = true
	}
}

// LongLived reports whether streams of the method (a full method name)
// are among those l bounds.
func (l *Limiter) LongLived(fullMethod string) bool { return l.methods[fullMethod] }

// Tap is a tap.ServerInHandle: it admits a stream of the Limiter's methods
// or refuses it (ResourceExhausted), ending another to make room when Max
// are held (see the package documentation). Streams of other methods pass.
// It never waits.
func (l *Limiter) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !l.methods[info.FullMethodName] {
		return ctx, nil
	}
	var conn net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		conn = p.Addr
	}
	ctx, cancel := context.WithCancelCause(ctx)
	e := &entry{caller: source.Of(conn), conn: conn, cancel: cancel}
	victim, err := l.admit(e)
	if err != nil {
		cancel(err)
		return ctx, err
	}
	if victim != nil {
		l.evicted.Add(1)
		victim.cancel(ErrEvicted)
	}
	context.AfterFunc(ctx, func() { l.release(e) })
	return ctx, nil
}

// admit counts e, or says which bound refuses it; it returns the stream
// to end to make room, if any.
func (l *Limiter) admit(e *entry) (victim *entry, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perConn[e.conn] >= l.b.PerConn {
		l.refusedConn.Add(1)
		return nil, status.Errorf(codes.ResourceExhausted, "this connection holds %d long-lived streams (health Watch, quota streams, reflection), the most one may: end one, or open another connection", l.b.PerConn)
	}
	mine := l.callers[e.caller]
	if mine != nil && mine.n >= l.b.PerCaller {
		l.refusedCaller.Add(1)
		return nil, status.Errorf(codes.ResourceExhausted, "your address holds %d long-lived streams (health Watch, quota streams, reflection) on its connections, the most one caller may", l.b.PerCaller)
	}
	if l.n >= l.b.Max {
		top := l.mostHeld()
		if top == mine || (mine != nil && top.n <= mine.n) {
			l.refusedFull.Add(1)
			return nil, status.Errorf(codes.ResourceExhausted, "the server holds %d long-lived streams (health Watch, quota streams, reflection), the most it may, and no caller holds more than you", l.b.Max)
		}
		victim = top.first
		l.remove(victim)
	}
	l.seq++
	e.seq = l.seq
	l.push(e)
	return victim, nil
}

// mostHeld returns the list of the caller holding the most streams (of
// those, the one whose oldest is oldest). Under l.mu, with a stream held.
func (l *Limiter) mostHeld() *callerList {
	var top *callerList
	for _, c := range l.callers {
		if top == nil || c.n > top.n || (c.n == top.n && c.first.seq < top.first.seq) {
			top = c
		}
	}
	return top
}

// push counts e, the newest of its caller's. Under l.mu.
func (l *Limiter) push(e *entry) {
	c := l.callers[e.caller]
	if c == nil {
		c = &callerList{}
		l.callers[e.caller] = c
	}
	if e.prev = c.last; c.last != nil {
		c.last.next = e
	} else {
		c.first = e
	}
	c.last = e
	c.n++
	l.n++
	l.perConn[e.conn]++
	e.held = true
}

// remove stops counting e, if it is counted. Under l.mu.
func (l *Limiter) remove(e *entry) {
	if !e.held {
		return
	}
	e.held = false
	c := l.callers[e.caller]
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.first = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.last = e.prev
	}
	e.prev, e.next = nil, nil
	if c.n--; c.n == 0 {
		delete(l.callers, e.caller)
	}
	l.n--
	if l.perConn[e.conn]--; l.perConn[e.conn] == 0 {
		delete(l.perConn, e.conn)
	}
}

// release stops counting e's stream, which ended.
func (l *Limiter) release(e *entry) {
	l.mu.Lock()
	l.remove(e)
	l.mu.Unlock()
}

// Held returns how many long-lived streams are held.
func (l *Limiter) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Refused returns how many streams were refused, by the bound that
// refused them: their connection's (PerConn), their caller's (PerCaller),
// the server's (Max, no caller holding more).
func (l *Limiter) Refused() (conn, caller, full uint64) {
	return l.refusedConn.Load(), l.refusedCaller.Load(), l.refusedFull.Load()
}

// Evicted returns how many streams were ended to make room.
func (l *Limiter) Evicted() uint64 { return l.evicted.Load() }

// StreamServerInterceptor answers a stream that was ended to make room
// with ResourceExhausted and ErrEvicted's message, whatever its handler
// returned as its context ended.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := handler(srv, ss)
		if l.methods[info.FullMethod] && errors.Is(context.Cause(ss.Context()), ErrEvicted) {
			return status.Error(codes.ResourceExhausted, ErrEvicted.Error())
		}
		return err
	}
}
