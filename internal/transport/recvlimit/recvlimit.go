// Package recvlimit bounds the gRPC streams whose request message has not
// arrived yet: how many there are at once, across every connection of a
// server, and how long each may take.
//
// grpc-go starts a handler for a stream when its HEADERS frame arrives and
// reads the message into memory as its DATA frames arrive, before any
// interceptor runs; a caller that opens streams and sends their messages
// slowly, or never, holds a goroutine and the bytes sent so far for each,
// for as long as it likes. A Limiter ends such streams:
//
//   - a stream whose message has not arrived Timeout after its HEADERS is
//     ended (its context is cancelled with ErrTimeout: the caller sees
//     CANCELLED);
//   - when Max streams are waiting and another one starts, one is ended
//     (ErrEvicted) to make room: the one waiting longest of the connection
//     with the most streams waiting. A well-formed call's message arrives
//     with or right after its headers, so its stream waits little, and a
//     client's connection seldom has more than a few waiting; streams held
//     open by a slow or absent message wait long, and many at once on the
//     connections of whoever holds them.
//
// The bytes a server buffers for messages being received are then at most
// Max × the server's largest message (grpc.MaxRecvMsgSize). An HTTP
// handler reading a request body can be bounded the same way (Wait and
// Arrived around the read, the read cut off when the context ends).
//
// Install Tap as (or inside) the server's grpc.InTapHandle, the
// interceptors first in their chains, and call Expire every ExpireEvery. A unary call's message
// has arrived when the unary interceptor runs; a streaming call's when its
// first RecvMsg returns. (A stats handler would see the same, but grpc-go
// makes every call build its events, some 20 allocations, once one is
// installed.) A stream that ends before its message arrives is counted
// among the waiting until it times out or is evicted (its end then does
// nothing more): watching every stream's end would cost each call a
// goroutine.
package recvlimit

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
)

// ErrTimeout is the cause of a stream's context ended because its message
// did not arrive within the Limiter's Timeout.
var ErrTimeout = errors.New("recvlimit: the request message did not arrive in time")

// ErrEvicted is the cause of a stream's context ended to make room for a
// newer stream.
var ErrEvicted = errors.New("recvlimit: too many streams waiting for their request message; this one was ended to make room")

// Limiter bounds the streams waiting for their request message. Its zero
// value is not usable: call New. It is safe for concurrent use.
type Limiter struct {
	max     int
	timeout time.Duration
	now     func() time.Time
	ended   func(conn net.Addr) // nil: none (WithEnded)

	mu      sync.Mutex
	waiting entry            // the sentinel of a ring of the waiting entries, oldest first (waiting.next)
	n       int              // entries waiting
	perConn map[net.Addr]int // entries waiting, by connection (the peer's address)

	timedOut, evicted atomic.Uint64
}

// entry is a stream's context, watched while its message is on the way.
type entry struct {
	context.Context
	since      time.Time
	cancel     context.CancelCauseFunc
	conn       net.Addr    // the connection's remote address (nil: unknown)
	prev, next *entry      // in Limiter.waiting while waiting; nil after; under Limiter.mu
	done       atomic.Bool // no longer waiting (set before it leaves the ring, or after)
}

// push appends e to the ring after the newest entry. Under Limiter.mu.
func (l *Limiter) push(e *entry) {
	last := l.waiting.prev
	e.prev, e.next = last, &l.waiting
	last.next, l.waiting.prev = e, e
	l.n++
	l.perConn[e.conn]++
}

// remove takes e out of the ring, if it is in it. Under Limiter.mu.
func (l *Limiter) remove(e *entry) {
	if e.next == nil {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	l.n--
	if l.perConn[e.conn]--; l.perConn[e.conn] == 0 {
		delete(l.perConn, e.conn)
	}
}

// victim returns the entry to end to make room: the oldest of the
// connection with the most entries waiting (of those, the one whose oldest
// waits longest). Under Limiter.mu, with at least one entry waiting.
func (l *Limiter) victim() *entry {
	most := 0
	for _, n := range l.perConn {
		most = max(most, n)
	}
	for e := l.oldest(); ; e = e.next {
		if l.perConn[e.conn] == most {
			return e
		}
	}
}

// oldest returns the entry waiting longest, or nil. Under Limiter.mu.
func (l *Limiter) oldest() *entry {
	if l.waiting.next == &l.waiting {
		return nil
	}
	return l.waiting.next
}

type entryKey struct{}

// An Option configures a Limiter.
type Option func(*Limiter)

// WithEnded has f called for every stream the Limiter ends (ErrTimeout or
// ErrEvicted), once its context is cancelled, with its connection's
// remote address as Wait was given it (a stream of an unknown connection
// is not reported). f runs on the goroutine of Wait or Expire and must not
// block: internal/transport/readpace's Pacer.Strike, which paces the connection's
// reads from then on, is one.
func WithEnded(f func(conn net.Addr)) Option {
	return func(l *Limiter) { l.ended = f }
}

// New returns a Limiter of at most max streams waiting at once (at least
// 1), each for at most timeout (at least 1ms).
func New(max int, timeout time.Duration, opts ...Option) *Limiter {
	l := &Limiter{max: max, timeout: timeout, now: time.Now, perConn: map[net.Addr]int{}}
	l.waiting.prev, l.waiting.next = &l.waiting, &l.waiting
	for _, o := range opts {
		o(l)
	}
	return l
}

// end cancels e's context with cause and reports it (WithEnded). Not under
// l.mu.
func (l *Limiter) end(e *entry, cause error) {
	e.cancel(cause)
	if l.ended != nil && e.conn != nil {
		l.ended(e.conn)
	}
}

// Tap is a tap.ServerInHandle: it registers the stream as waiting for its
// message (Wait, with the connection of its peer), ending another (see the
// package documentation) when Max are. It never refuses a stream.
func (l *Limiter) Tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	var conn net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		conn = p.Addr
	}
	return l.Wait(ctx, conn), nil
}

// Wait registers a request whose message (or body) is on its way, from the
// connection whose remote address is conn (nil: unknown), ending another
// when Max are waiting, and returns the request's context: it is cancelled
// with ErrTimeout or ErrEvicted when the request is ended. Arrived, with
// that context, says the message has come. (A gRPC server calls it through
// Tap; an HTTP handler reading a body calls it itself.)
func (l *Limiter) Wait(ctx context.Context, conn net.Addr) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	e := &entry{Context: ctx, cancel: cancel, conn: conn}
	var evicted *entry
	l.mu.Lock()
	e.since = l.now()
	if l.n >= l.max {
		evicted = l.victim()
		l.remove(evicted)
	}
	l.push(e)
	l.mu.Unlock()
	if evicted != nil {
		l.evicted.Add(1)
		l.end(evicted, ErrEvicted)
	}
	return e
}

// Value returns e for entryKey, else what its context holds.
func (e *entry) Value(key any) any {
	if key == (entryKey{}) {
		return e
	}
	return e.Context.Value(key)
}

// Arrived forgets the stream of ctx, whose message has arrived; it does
// nothing for a context Tap did not make.
func (l *Limiter) Arrived(ctx context.Context) {
	if e, ok := ctx.Value(entryKey{}).(*entry); ok {
		l.forget(e)
	}
}

// forget stops watching e's stream: its message arrived, or it ended.
func (l *Limiter) forget(e *entry) {
	if e.done.Swap(true) {
		return
	}
	l.mu.Lock()
	l.remove(e)
	l.mu.Unlock()
}

// Waiting returns how many streams are waiting for their message.
func (l *Limiter) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Ended returns how many streams were ended for their late message, and
// how many to make room for a newer one.
func (l *Limiter) Ended() (timedOut, evicted uint64) { return l.timedOut.Load(), l.evicted.Load() }

// ExpireEvery is how often Expire should run: a tenth of the timeout (at
// least a millisecond), so that a stream is ended between Timeout and
// 1.1 × Timeout after its headers.
func (l *Limiter) ExpireEvery() time.Duration { return max(l.timeout/10, time.Millisecond) }

// Expire ends the streams that have waited Timeout or longer.
func (l *Limiter) Expire() {
	var late []*entry
	l.mu.Lock()
	deadline := l.now().Add(-l.timeout)
	for e := l.oldest(); e != nil && !e.since.After(deadline); e = l.oldest() {
		l.remove(e)
		late = append(late, e)
	}
	l.mu.Unlock()
	l.timedOut.Add(uint64(len(late)))
	for _, e := range late {
		l.end(e, ErrTimeout)
	}
}

// UnaryServerInterceptor marks each unary call's message arrived (it
// runs once the message is read).
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		l.Arrived(ctx)
		return handler(ctx, req)
	}
}

// StreamServerInterceptor marks a streaming call's message arrived when
// its first RecvMsg returns.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &stream{ServerStream: ss, l: l})
	}
}

type stream struct {
	grpc.ServerStream
	l *Limiter
}

func (s *stream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	s.l.Arrived(s.Context())
	return err
}
