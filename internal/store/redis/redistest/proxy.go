package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of one Redis server, for the
// faults a real server does not make on demand: a reply lost after its
// command ran, a server that refuses every connection, a reply that takes
// a while (BeforeReply). It forwards bytes unchanged otherwise.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu          sync.Mutex
	down        bool
	dropCommand string // lower case; "" for none
	beforeReply func()
	conns       map[*proxyConn]struct{}
	closed      bool
	wg          sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	drop           atomic.Bool // swallow the next reply and hang up
}

func (c *proxyConn) close() {
	c.client.Close()
	c.server.Close()
}

// StartProxy listens on a free loopback port and forwards every
// connection to target (host:port). It stops when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startProxy(t, ln, target)
}

func startProxy(t testing.TB, ln net.Listener, target string) *Proxy {
	p := &Proxy{t: t, ln: ln, target: target, conns: make(map[*proxyConn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port, which clients use instead of the
// server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetDown(true) hangs up every connection and then every new one at once,
// as a server that is gone would (without the client's dial failing, so
// that it never backs off dialing); SetDown(false) forwards again.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.close()
		}
	}
}

// DropReply arms the proxy once: the next command named command (say
// "evalsha") that a client sends is forwarded to Redis, which runs it, and
// then its reply is swallowed and the client's connection closed, so that
// the client reads EOF after the command took effect.
func (p *Proxy) DropReply(command string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropCommand = string(bytes.ToLower([]byte(command)))
}

// BeforeReply sets a function the proxy calls before it forwards each
// reply from Redis to the client (nil: none): a test can move a clock
// there, as if the reply had taken that long.
func (p *Proxy) BeforeReply(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beforeReply = f
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down || p.closed {
			p.mu.Unlock()
			client.Close()
			continue
		}
		p.mu.Unlock()
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.down || p.closed {
			p.mu.Unlock()
			c.close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.requests(c)
		go p.replies(c)
	}
}

func (p *Proxy) forget(c *proxyConn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// requests copies client to server, arming c.drop when a chunk carries
// the armed command (its name is a RESP bulk string: "\r\n<name>\r\n").
func (p *Proxy) requests(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.dropCommand != "" && bytes.Contains(bytes.ToLower(buf[:n]), []byte("\r\n"+p.dropCommand+"\r\n")) {
				p.dropCommand = ""
				c.drop.Store(true)
			}
			p.mu.Unlock()
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies copies server to client, or, once c.drop is armed, hangs up on
// the client when the reply comes.
func (p *Proxy) replies(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if c.drop.Load() {
				return // the deferred forget closes both sides: the client reads EOF
			}
			p.mu.Lock()
			f := p.beforeReply
			p.mu.Unlock()
			if f != nil {
				f()
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
