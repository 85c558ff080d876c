// Package readpace slows down reading from the connections that have
// shown themselves abusive, so that they cannot make a server read (and
// spend its CPU on) more than a bounded number of bytes a second, while
// every other connection is read as fast as it sends.
//
// A server ends a stream that holds its place too long (internal/transport/recvlimit:
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
// A strike paces the connection's source too (internal/transport/source: its IPv4
// address, or its IPv6 /64): a connection that source opens within Quiet
// of the strike is paced from its first Read, as the struck one is, until
// Quiet has passed since that strike. A sender whose paced connection is
// struck cannot shed its pace by opening a new one; a client sharing its
// address (behind one NAT) has its new connections paced meanwhile, and
// read at their share of Rate, not refused. At most MaxSources sources
// are remembered at once: a strike of another source, that many being
// remembered and none expired, paces its connection only. A source has at
// most MaxPacedPerSource connections paced at once: when one more of its
// connections is to be paced, the one of them that owes the most (whose
// reads are paid for latest) is closed. A sender that abandons paced
// connections for new ones, which would each linger until it has paid
// what it owes (a closed connection is noticed only when it is read),
// thus holds that many at most.
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
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/transport/source"
)

const (
	// Chunk is the most a paced connection's Read reads at once: the
	// bytes read ahead of the pace are at most this many.
	Chunk = 16 << 10
	// StreamCost is what a new stream costs a paced connection, in bytes
	// of its pace.
	StreamCost = 4 << 10
	// MaxSources is how many struck sources a Pacer remembers at once.
	MaxSources = 4096
	// MaxPacedPerSource is how many connections of one source are paced
	// at once.
	MaxPacedPerSource = 16
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

	mu      sync.Mutex
	conns   map[net.Addr]*Conn                  // open, by remote address (the very value RemoteAddr returns)
	sources map[netip.Prefix]int64              // struck sources: until when (clock time) their new connections are paced
	pacedBy map[netip.Prefix]map[*Conn]struct{} // the paced connections, by source
}

// New returns a Pacer reading the paced connections at most rate bytes a
// second altogether (at least 1), each of them for quiet after its last
// strike.
func New(rate int64, quiet time.Duration) *Pacer {
	return &Pacer{rate: max(rate, 1), quiet: quiet, clock: clock.NewMonotonic(), sleep: sleep, conns: map[net.Addr]*Conn{}, sources: map[netip.Prefix]int64{}, pacedBy: map[netip.Prefix]map[*Conn]struct{}{}}
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
	c := &Conn{Conn: nc, p: l.p, src: source.Of(nc.RemoteAddr()), closed: make(chan struct{})}
	l.p.mu.Lock()
	l.p.conns[nc.RemoteAddr()] = c
	until := l.p.sources[c.src]
	l.p.mu.Unlock()
	if until != 0 {
		c.pace(until)
	}
	return c, nil
}

// Conn is a connection a Pacer's listener accepted.
type Conn struct {
	net.Conn
	p     *Pacer
	src   netip.Prefix
	until atomic.Int64 // while paced, the time (clock.Clock's) its pacing ends; 0 when not paced
	tat   atomic.Int64 // when what it has read so far is paid for (clock time); changed under mu

	mu     sync.Mutex    // for the changes of until and tat
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
	wait := time.Duration(c.tat.Load() - now)
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
	c.tat.Store(max(c.tat.Load(), now) + n*int64(time.Second)*max(c.p.paced.Load(), 1)/c.p.rate)
}

// unpace stops pacing c. Under c.mu.
func (c *Conn) unpace() {
	if c.until.Swap(0) != 0 {
		c.p.paced.Add(-1)
		c.p.mu.Lock()
		if set := c.p.pacedBy[c.src]; set != nil {
			if delete(set, c); len(set) == 0 {
				delete(c.p.pacedBy, c.src)
			}
		}
		c.p.mu.Unlock()
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
// now, and the connections its source opens meanwhile. It does nothing
// for an address none of p's open connections has.
func (p *Pacer) Strike(addr net.Addr) {
	c := p.conn(addr)
	if c == nil {
		return
	}
	until := p.clock.Now() + int64(p.quiet)
	p.strikeSource(c.src, until)
	c.pace(until)
}

// strikeSource remembers that the source's new connections are paced until
// until, making room among MaxSources by forgetting the expired.
func (p *Pacer) strikeSource(src netip.Prefix, until int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.sources[src]; !ok && len(p.sources) >= MaxSources {
		now := p.clock.Now()
		for s, u := range p.sources {
			if u <= now {
				delete(p.sources, s)
			}
		}
		if len(p.sources) >= MaxSources {
			return
		}
	}
	p.sources[src] = until
}

// pace paces c until until (clock time), unless it is closed or paced
// longer already; when that makes more than MaxPacedPerSource of its
// source's connections paced, it closes the one of them that owes the
// most.
func (c *Conn) pace(until int64) {
	if victim := c.startPace(until); victim != nil {
		victim.Close()
	}
}

// startPace is pace but for the closing: it returns the connection to close.
func (c *Conn) startPace(until int64) (victim *Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
		return nil
	default:
	}
	now := c.p.clock.Now()
	if until <= now {
		return nil
	}
	old := c.until.Load()
	if old > until {
		return nil
	}
	c.until.Store(until)
	if old != 0 {
		return nil
	}
	c.tat.Store(now)
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	set := c.p.pacedBy[c.src]
	if set == nil {
		set = map[*Conn]struct{}{}
		c.p.pacedBy[c.src] = set
	}
	set[c] = struct{}{}
	if len(set) > MaxPacedPerSource {
		for o := range set {
			if o != c && (victim == nil || o.tat.Load() > victim.tat.Load()) {
				victim = o
			}
		}
		// The victim stops counting now, before c counts, so that Paced
		// never reads more than MaxPacedPerSource of one source; closing it
		// finds it unpaced already. Meanwhile it is not chosen twice.
		delete(set, victim)
		if victim.until.Swap(0) != 0 {
			c.p.paced.Add(-1)
		}
	}
	c.p.paced.Add(1)
	return victim
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
