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
//   - when Max streams are receiving and another one starts, the stream
//     that has been receiving longest is ended (ErrEvicted) to make room.
//     A well-formed call's message arrives with or right after its
//     headers, so it is never the oldest for long; streams held open by a
//     slow or absent message are.
//
// The bytes a server buffers for messages being received are then at most
// Max × the server's largest message (grpc.MaxRecvMsgSize).
//
// Install Tap as (or inside) the server's grpc.InTapHandle, StatsHandler
// with grpc.StatsHandler, and run Run. A stream's message has arrived at
// its first stats.InPayload; a stream that ends before it (stats.End) is
// forgotten too. Streaming methods stop being watched at their first
// message.
package recvlimit

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/tap"
)

// ErrTimeout is the cause of a stream's context ended because its message
// did not arrive within the Limiter's Timeout.
var ErrTimeout = errors.New("recvlimit: the request message did not arrive in time")

// ErrEvicted is the cause of a stream's context ended to make room for a
// newer stream.
var ErrEvicted = errors.New("recvlimit: too many streams waiting for their request message; the oldest was ended")

// Limiter bounds the streams waiting for their request message. Its zero
// value is not usable: call New. It is safe for concurrent use.
type Limiter struct {
	max     int
	timeout time.Duration
	now     func() time.Time

	mu      sync.Mutex
	waiting list.List // of *entry, oldest first

	timedOut, evicted atomic.Uint64
}

type entry struct {
	since  time.Time
	cancel context.CancelCauseFunc
	el     *list.Element // nil once no longer waiting; under Limiter.mu
	done   atomic.Bool   // no longer waiting (set before el is cleared, or after)
}

type entryKey struct{}

// New returns a Limiter of at most max streams waiting at once (at least
// 1), each for at most timeout (at least 1ms).
func New(max int, timeout time.Duration) *Limiter {
	return &Limiter{max: max, timeout: timeout, now: time.Now}
}

// Tap is a tap.ServerInHandle: it registers the stream as waiting for its
// message, ending the one waiting longest when Max are. It never refuses a
// stream.
func (l *Limiter) Tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	e := &entry{cancel: cancel}
	var evicted *entry
	l.mu.Lock()
	e.since = l.now()
	if l.waiting.Len() >= l.max {
		evicted = l.waiting.Remove(l.waiting.Front()).(*entry)
		evicted.el = nil
	}
	e.el = l.waiting.PushBack(e)
	l.mu.Unlock()
	if evicted != nil {
		l.evicted.Add(1)
		evicted.cancel(ErrEvicted)
	}
	return context.WithValue(ctx, entryKey{}, e), nil
}

// arrived forgets the stream of ctx: its message arrived, or it ended.
func (l *Limiter) arrived(ctx context.Context) {
	e, ok := ctx.Value(entryKey{}).(*entry)
	if !ok || e.done.Swap(true) {
		return
	}
	l.mu.Lock()
	if e.el != nil {
		l.waiting.Remove(e.el)
		e.el = nil
	}
	l.mu.Unlock()
}

// Waiting returns how many streams are waiting for their message.
func (l *Limiter) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting.Len()
}

// Ended returns how many streams were ended for their late message, and
// how many to make room for a newer one.
func (l *Limiter) Ended() (timedOut, evicted uint64) { return l.timedOut.Load(), l.evicted.Load() }

// Run ends the streams waiting longer than the timeout, checking every
// tenth of it (at least every millisecond), until ctx ends. A stream is
// thus ended between Timeout and 1.1 × Timeout after its headers.
func (l *Limiter) Run(ctx context.Context) {
	t := time.NewTicker(max(l.timeout/10, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.expire()
		}
	}
}

// expire ends the streams waiting since before now − timeout.
func (l *Limiter) expire() {
	var late []*entry
	l.mu.Lock()
	deadline := l.now().Add(-l.timeout)
	for f := l.waiting.Front(); f != nil && !f.Value.(*entry).since.After(deadline); f = l.waiting.Front() {
		e := l.waiting.Remove(f).(*entry)
		e.el = nil
		late = append(late, e)
	}
	l.mu.Unlock()
	l.timedOut.Add(uint64(len(late)))
	for _, e := range late {
		e.cancel(ErrTimeout)
	}
}

// StatsHandler returns the stats.Handler that tells the Limiter when a
// stream's message has arrived.
func (l *Limiter) StatsHandler() stats.Handler { return handler{l} }

type handler struct{ l *Limiter }

func (h handler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h handler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h handler) HandleConn(context.Context, stats.ConnStats) {}
func (h handler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s.(type) {
	case *stats.InPayload, *stats.End:
		h.l.arrived(ctx)
	}
}
