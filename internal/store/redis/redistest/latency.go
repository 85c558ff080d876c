package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// LatencyProxy is a TCP proxy on loopback that delays every byte by a
// fixed time in each direction, as a Redis that far away would: a round
// trip takes twice the delay more than it would, whatever is in flight
// (bytes are not held back by the bytes before them, only by the delay).
type LatencyProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartLatencyProxy listens on a free loopback port and forwards every
// connection to target (host:port), each direction delayed by delay. It
// stops when the test ends.
func StartLatencyProxy(t testing.TB, target string, delay time.Duration) *LatencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &LatencyProxy{ln: ln, target: target, delay: delay}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *LatencyProxy) Addr() string { return p.ln.Addr().String() }

func (p *LatencyProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

// chunk is bytes read at a time, to be written delay later.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst, each chunk written p.delay after it was
// read, in order.
func (p *LatencyProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	chunks := make(chan chunk, 4096)
	go func() {
		defer dst.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				for range chunks { // drain until the reader ends
				}
				return
			}
		}
	}()
	defer close(chunks)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			chunks <- chunk{buf[:n], time.Now().Add(p.delay)}
		}
		if err != nil {
			return
		}
	}
}

func (p *LatencyProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
