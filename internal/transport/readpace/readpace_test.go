package readpace

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
)

const rate = 1 << 20 // bytes a second, every paced connection together

// fakePacer returns a Pacer on a fake clock whose sleeps advance the clock
// and are added up in *slept.
func fakePacer(t *testing.T) (p *Pacer, fake *clock.Fake, slept func() time.Duration) {
	fake = clock.NewFake(time.Unix(1000, 0).UnixNano())
	p = New(rate, 30*time.Second)
	p.clock = fake
	var mu sync.Mutex
	var total time.Duration
	p.sleep = func(d time.Duration, _ <-chan struct{}) {
		mu.Lock()
		total += d
		mu.Unlock()
		fake.Advance(d)
	}
	return p, fake, func() time.Duration { mu.Lock(); defer mu.Unlock(); return total }
}

// pipe returns the server's end of a real TCP connection accepted by a
// listener p wraps, and the client's end.
func pipe(t *testing.T, p *Pacer) (server *Conn, client net.Conn) {
	t.Helper()
	return pipeFrom(t, p, "127.0.0.1")
}

// pipeFrom is pipe with the client's end on the local address from (any
// of 127.0.0.0/8 reaches a listener on 127.0.0.1: a source of its own).
func pipeFrom(t *testing.T, p *Pacer, from string) (server *Conn, client net.Conn) {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := p.Wrap(nl)
	t.Cleanup(func() { l.Close() })
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	client, err = d.Dial("tcp", nl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return sc.(*Conn), client
}

// send writes n bytes to c in the background (should it fail, the reader
// of the other end sees an error).
func send(c net.Conn, n int) {
	go c.Write(make([]byte, n))
}

// readAll reads n bytes from c, 64 KiB asked for at a time (as a bufio
// reader larger than Chunk would), and returns the largest single read.
func readAll(t *testing.T, c net.Conn, n int) (largest int) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for n > 0 {
		got, err := c.Read(buf[:min(len(buf), n)])
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		n -= got
		largest = max(largest, got)
	}
	return largest
}

// paid is the time reading n bytes at r bytes a second takes.
func paid(n, r int) time.Duration { return time.Duration(int64(n) * int64(time.Second) / int64(r)) }

// TestStruckConnectionPaced: a connection is read unpaced until it is
// struck; then at Rate, Chunk at a time, until Quiet has passed since the
// strike; then unpaced again.
func TestStruckConnectionPaced(t *testing.T) {
	p, fake, slept := fakePacer(t)
	c, client := pipe(t, p)

	const n = 1 << 20
	send(client, n)
	readAll(t, c, n)
	if slept() != 0 || p.Paced() != 0 {
		t.Fatalf("before a strike: slept %v, %d paced; want 0, 0", slept(), p.Paced())
	}

	p.Strike(c.RemoteAddr())
	if p.Paced() != 1 {
		t.Fatalf("%d connections paced after a strike, want 1", p.Paced())
	}
	send(client, n)
	if largest := readAll(t, c, n); largest > Chunk {
		t.Errorf("a paced read returned %d bytes, more than Chunk (%d)", largest, Chunk)
	}
	// Each read waits for the ones before it to be paid: all but the last.
	if got, lo, hi := slept(), paid(n-Chunk, rate), paid(n, rate); got < lo || got > hi {
		t.Errorf("reading %d bytes paced at %d B/s slept %v, want between %v and %v", n, rate, got, lo, hi)
	}

	fake.Advance(30 * time.Second) // Quiet since the strike (a second of it slept)
	before := slept()
	send(client, n)
	readAll(t, c, n)
	if slept() != before || p.Paced() != 0 {
		t.Errorf("Quiet after the strike: slept %v more, %d paced; want unpaced", slept()-before, p.Paced())
	}
}

// TestPacedConnectionsShareRate: the paced connections together are read
// at Rate, each at its equal share; a connection closed leaves its share
// to the others.
func TestPacedConnectionsShareRate(t *testing.T) {
	p, _, slept := fakePacer(t)
	a, clientA := pipe(t, p)
	b, _ := pipe(t, p)
	p.Strike(a.RemoteAddr())
	p.Strike(b.RemoteAddr())

	const n = 256 << 10
	send(clientA, n)
	readAll(t, a, n)
	if got, lo, hi := slept(), paid(n-Chunk, rate/2), paid(n, rate/2); got < lo || got > hi {
		t.Errorf("one of 2 paced connections: %d bytes slept %v, want between %v and %v (half the rate)", n, got, lo, hi)
	}

	b.Close()
	if p.Paced() != 1 {
		t.Fatalf("%d paced after one of two closed, want 1", p.Paced())
	}
	before := slept()
	send(clientA, n)
	readAll(t, a, n)
	// (the first read pays for the last of before, at half the rate: up to 2 Chunks' time)
	if got, lo, hi := slept()-before, paid(n-Chunk, rate), paid(n+2*Chunk, rate); got < lo || got > hi {
		t.Errorf("the one paced connection left: %d bytes slept %v, want between %v and %v (the whole rate)", n, got, lo, hi)
	}
}

// TestTapChargesStreams: a new stream on a paced connection costs it
// StreamCost, paid before its next read; on a connection not paced it
// costs nothing.
func TestTapChargesStreams(t *testing.T) {
	p, _, slept := fakePacer(t)
	a, clientA := pipe(t, p)
	b, clientB := pipe(t, p)
	stream := func(c net.Conn) {
		if _, err := p.Tap(peer.NewContext(context.Background(), &peer.Peer{Addr: c.RemoteAddr()}), nil); err != nil {
			t.Fatal(err)
		}
	}
	p.Strike(a.RemoteAddr())
	for range 10 {
		stream(a)
		stream(b)
	}
	send(clientB, 1)
	readAll(t, b, 1)
	if slept() != 0 {
		t.Fatalf("the connection not paced slept %v, want 0", slept())
	}
	send(clientA, 1)
	readAll(t, a, 1)
	if want := paid(10*StreamCost, rate); slept() != want {
		t.Errorf("10 streams on the paced connection: slept %v before its next read, want %v", slept(), want)
	}
}

// TestStrikeUnknown: a strike of an address no open connection has (one
// closed since) does nothing.
func TestStrikeUnknown(t *testing.T) {
	p, _, _ := fakePacer(t)
	c, _ := pipe(t, p)
	addr := c.RemoteAddr()
	c.Close()
	p.Strike(addr)
	p.Strike(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1})
	if p.Paced() != 0 {
		t.Errorf("%d paced, want 0", p.Paced())
	}
}

// TestCloseEndsPacedRead: closing a paced connection ends a Read waiting
// for its turn (as a server shutting down closes its connections), rather
// than leaving it to sleep its debt off.
func TestCloseEndsPacedRead(t *testing.T) {
	p := New(1, 30*time.Second) // a byte a second, on the real clock
	c, client := pipe(t, p)
	p.Strike(c.RemoteAddr())
	if _, err := p.Tap(peer.NewContext(context.Background(), &peer.Peer{Addr: c.RemoteAddr()}), nil); err != nil {
		t.Fatal(err)
	} // a stream: StreamCost seconds owed
	send(client, 1)
	sleeping, sleep := make(chan struct{}), p.sleep
	p.sleep = func(d time.Duration, cancel <-chan struct{}) { close(sleeping); sleep(d, cancel) }
	done := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); done <- err }()
	<-sleeping
	c.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a Read of a closed connection succeeded")
		}
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatal("Close did not end the paced Read's wait")
	}
}

// TestSuccessorPaced: a strike paces the connections its source opens
// until Quiet has passed since it, from their first read; another
// source's connections are not paced, nor the source's after Quiet.
func TestSuccessorPaced(t *testing.T) {
	p, fake, slept := fakePacer(t)
	struck, _ := pipeFrom(t, p, "127.0.0.2")
	p.Strike(struck.RemoteAddr())
	struck.Close() // the sender leaves it for a new one

	other, clientOther := pipeFrom(t, p, "127.0.0.3")
	send(clientOther, 1<<20)
	readAll(t, other, 1<<20)
	if slept() != 0 || p.Paced() != 0 {
		t.Fatalf("another source's connection: slept %v, %d paced; want unpaced", slept(), p.Paced())
	}

	successor, client := pipeFrom(t, p, "127.0.0.2")
	if p.Paced() != 1 {
		t.Fatalf("%d paced after the struck source connected again, want 1", p.Paced())
	}
	const n = 256 << 10
	send(client, n)
	if largest := readAll(t, successor, n); largest > Chunk {
		t.Errorf("the successor read %d bytes at once, more than Chunk (%d)", largest, Chunk)
	}
	if got, lo, hi := slept(), paid(n-Chunk, rate), paid(n, rate); got < lo || got > hi {
		t.Errorf("the successor: %d bytes slept %v, want between %v and %v", n, got, lo, hi)
	}

	fake.Advance(30 * time.Second)
	later, clientLater := pipeFrom(t, p, "127.0.0.2")
	before := slept()
	send(clientLater, n)
	readAll(t, later, n)
	if slept() != before {
		t.Errorf("a connection of the source Quiet after the strike slept %v, want unpaced", slept()-before)
	}
}

// TestPacedPerSourceBounded: a source has at most MaxPacedPerSource
// connections paced; one more closes the one of them that owes the most.
func TestPacedPerSourceBounded(t *testing.T) {
	p, _, _ := fakePacer(t)
	first, _ := pipeFrom(t, p, "127.0.0.2")
	p.Strike(first.RemoteAddr())
	clients := map[*Conn]net.Conn{}
	for range MaxPacedPerSource - 1 {
		c, client := pipeFrom(t, p, "127.0.0.2")
		clients[c] = client
	}
	if p.Paced() != MaxPacedPerSource {
		t.Fatalf("%d paced, want %d", p.Paced(), MaxPacedPerSource)
	}
	var owing *Conn
	for c := range clients {
		owing = c
		break
	}
	if _, err := p.Tap(peer.NewContext(context.Background(), &peer.Peer{Addr: owing.RemoteAddr()}), nil); err != nil {
		t.Fatal(err)
	} // it owes a stream's cost, the others nothing
	pipeFrom(t, p, "127.0.0.2")
	if p.Paced() != MaxPacedPerSource {
		t.Errorf("%d paced after one more connection of the source, want %d", p.Paced(), MaxPacedPerSource)
	}
	clients[owing].SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound on a hang
	if _, err := clients[owing].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the connection owing the most: read %v, want EOF (closed)", err)
	}
	for c, client := range clients {
		if c != owing && c.until.Load() == 0 {
			t.Errorf("connection %v no longer paced", client.LocalAddr())
		}
	}
}
