// Package readpace slows down reading from the connections that have
// shown themselves abusive, so that they cannot make a server read (and
// spend its CPU on) more than a bounded number of bytes a second, while
// every other connection is read as fast as it sends.
//
// A server ends a stream that holds its place too long (internal/recvlimit:
// a request message that is late, or a stream evicted to make room) and
// Strikes its connection. From then on the connection is paced: each Read
// on it first waits until the connection has paid for what it read
// before, then reads at most Chunk bytes. Reading less makes the kernel's
// receive buffer fill and TCP's flow control hold the sender back; with
// HTTP/2 the sender's windows stay spent too, since the server grants
// window only for what it has read. The paced connections together are
// read at most Rate bytes a second, shared equally: each is read at most
// Rate / n bytes a second, n being the connections paced at the time.
// Many connections each abusing a little therefore get no more than one
// abusing a lot. A new stream on a paced connection (Tap) costs it
// StreamCost bytes besides the bytes of its frames, so that a sender that
// opens stream after stream with little data in each is paced too.
//
// A connection is paced until Quiet has passed since its last strike:
// a client whose one stream was ended recovers after Quiet, reading paced
// meanwhile at its share of Rate. (A paced connection leaves the count
// of those paced at its first Read after Quiet, or when it is closed.) A
// connection that is not paced is not slowed at all: its Read costs one
// atomic load more than the net.Conn's, and Tap one atomic load while no
// connection is paced.
//
// Serve the listener Wrap returns, call Strike with the remote address of
// a connection whose stream was ended, and install Tap among the server's
// grpc.InTapHandle taps.
package readpace

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/ratelimitd/ratelimitd/internal/clock"
)

const (
	// Chunk is the most a paced connection's Read reads at once: the
	// bytes read ahead of the pace are at most this many.
	Chunk = 16 << 10
	// StreamCost is what a new stream costs a paced connection, in bytes
	// of its pace.
	StreamCost = 4 << 10
)

// Pacer paces the reads of the connections of its listeners that were
// struck. Its zero value is not usable: call New. It is safe for
// concurrent use.
type Pacer struct {
	rate  int64         // bytes a second, every paced connection together
	quiet time.Duration // paced until this long after the last strike
	clock clock.Clock
	sleep func(d time.Duration, cancel <-chan struct{}) // waits d, or until cancel is closed

	paced atomic.Int64 // connections paced now

	mu    sync.Mutex
	conns map[net.Addr]*Conn // open, by remote address (the very value RemoteAddr returns)
}

// New returns a Pacer reading the paced connections at most rate bytes a
// second altogether (at least 1), each of them for quiet after its last
// strike.
func New(rate int64, quiet time.Duration) *Pacer {
	return &Pacer{rate: max(rate, 1), quiet: quiet, clock: clock.NewMonotonic(), sleep: sleep, conns: map[net.Addr]*Conn{}}
}

// sleep waits d, or until cancel is closed.
func sleep(d time.Duration, cancel <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cancel:
	}
}

// Paced returns how many connections are paced.
func (p *Pacer) Paced() int { return int(p.paced.Load()) }

// Wrap returns l, its connections wrapped in Conns that p can pace.
func (p *Pacer) Wrap(l net.Listener) net.Listener { return &listener{Listener: l, p: p} }

type listener struct {
	net.Listener
	p *Pacer
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &Conn{Conn: nc, p: l.p, closed: make(chan struct{})}
	l.p.mu.Lock()
	l.p.conns[nc.RemoteAddr()] = c
	l.p.mu.Unlock()
	return c, nil
}

// Conn is a connection a Pacer's listener accepted.
type Conn struct {
	net.Conn
	p     *Pacer
	until atomic.Int64 // while paced, the time (clock.Clock's) its pacing ends; 0 when not paced

	mu     sync.Mutex    // for the fields below and the changes of until
	tat    int64         // when what it has read so far is paid for (clock time)
	closed chan struct{} // closed by Close
}

// Read reads into b, for a paced connection at most Chunk bytes and only
// once it has paid for its earlier reads and streams (or is closed: Close
// ends the wait, and the read fails).
func (c *Conn) Read(b []byte) (int, error) {
	if c.until.Load() == 0 {
		return c.Conn.Read(b)
	}
	return c.pacedRead(b)
}

func (c *Conn) pacedRead(b []byte) (int, error) {
	c.mu.Lock()
	now := c.p.clock.Now()
	if now >= c.until.Load() {
		c.unpace()
		c.mu.Unlock()
		return c.Conn.Read(b)
	}
	wait := time.Duration(c.tat - now)
	c.mu.Unlock()
	if wait > 0 {
		c.p.sleep(wait, c.closed)
	}
	select {
	case <-c.closed: // Close ended the wait: it may not have closed c.Conn yet
		return 0, net.ErrClosed
	default:
	}
	n, err := c.Conn.Read(b[:min(len(b), Chunk)])
	c.charge(int64(n))
	return n, err
}

// charge adds what n bytes cost to what c owes, if it is paced.
func (c *Conn) charge(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until.Load() == 0 {
		return
	}
	now := c.p.clock.Now()
	c.tat = max(c.tat, now) + n*int64(time.Second)*max(c.p.paced.Load(), 1)/c.p.rate
}

// unpace stops pacing c. Under c.mu.
func (c *Conn) unpace() {
	if c.until.Swap(0) != 0 {
		c.p.paced.Add(-1)
	}
}

// Close closes the connection and stops pacing it.
func (c *Conn) Close() error {
	c.p.mu.Lock()
	if k := c.RemoteAddr(); c.p.conns[k] == c {
		delete(c.p.conns, k)
	}
	c.p.mu.Unlock()
	c.mu.Lock()
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	c.unpace()
	c.mu.Unlock()
	return c.Conn.Close()
}

// conn returns the open connection of remote address addr, or nil.
func (p *Pacer) conn(addr net.Addr) *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns[addr]
}

// Strike paces the connection whose remote address is addr (the very
// value its RemoteAddr returns, as grpc-go's peer.Addr is) for Quiet from
// now. It does nothing for an address none of p's open connections has.
func (p *Pacer) Strike(addr net.Addr) {
	c := p.conn(addr)
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
		return
	default:
	}
	now := p.clock.Now()
	if c.until.Swap(now+int64(p.quiet)) == 0 {
		p.paced.Add(1)
		c.tat = now
	}
}

// Tap is a tap.ServerInHandle: a new stream costs its connection
// StreamCost, when the connection is paced. It never refuses a stream,
// nor waits (grpc-go calls it holding its transport's lock): the
// connection's next Read waits.
func (p *Pacer) Tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	if p.paced.Load() == 0 {
		return ctx, nil
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if c := p.conn(pr.Addr); c != nil {
			c.charge(StreamCost)
		}
	}
	return ctx, nil
}
