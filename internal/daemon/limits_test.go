package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/testkit/h2raw"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const v1Method = "/ratelimit.v1.RateLimitService/ShouldRateLimit"

// h2 is a raw HTTP/2 connection to the gRPC port that fails the test on
// errors.
type h2 struct {
	*h2raw.Conn
	t *testing.T
}

func dialH2(t *testing.T, addr string) *h2 {
	t.Helper()
	return dialH2From(t, "", addr)
}

// dialH2From is dialH2 from the local address from (h2raw.DialFrom).
func dialH2From(t *testing.T, from, addr string) *h2 {
	t.Helper()
	c, err := h2raw.DialFrom(from, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &h2{c, t}
}

func (c *h2) open(method string, extra ...string) uint32 {
	c.t.Helper()
	id, err := c.Open(method, extra...)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

func (c *h2) sendPart(id uint32, size, part int) {
	c.t.Helper()
	if err := c.SendPart(id, size, part); err != nil {
		c.t.Fatal(err)
	}
}

// nextEnd is h2raw.Conn.NextEnd, waiting at most wait (a bound on a test
// that would otherwise hang, not a timing check).
func (c *h2) nextEnd(wait time.Duration) h2raw.Ended {
	c.t.Helper()
	e, err := c.NextEnd(wait)
	if err != nil {
		c.t.Fatal(err)
	}
	return e
}

func (c *h2) read(wait time.Duration) http2.Frame {
	c.t.Helper()
	f, err := c.Read(wait)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

// TestStreamsPerConnectionBounded: the gRPC port advertises its limit of
// concurrent streams per connection, and refuses a stream beyond it.
func TestStreamsPerConnectionBounded(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) { c.Limits.MaxConcurrentStreams = 3 })
	c := dialH2(t, d.GRPCAddr())
	if got, ok := c.Settings[http2.SettingMaxConcurrentStreams]; !ok || got != 3 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent: %v), want 3", got, ok)
	}
	for range 3 {
		c.open(v1Method)
	}
	fourth := c.open(v1Method)
	if e := c.nextEnd(10 * time.Second); e.ID != fourth || e.RST != http2.ErrCodeRefusedStream {
		t.Fatalf("first stream ended: %+v, want stream %d refused (REFUSED_STREAM)", e, fourth)
	}
}

// TestMessageNeverArriving: a call whose message does not arrive within
// the message timeout is ended, whether nothing of it came or a part.
func TestMessageNeverArriving(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) { c.Limits.MessageTimeout = 200 * time.Millisecond })
	c := dialH2(t, d.GRPCAddr())
	nothing := c.open(v1Method)
	part := c.open(v1Method)
	c.sendPart(part, 1000, 10)
	got := map[uint32]bool{}
	for range 2 {
		e := c.nextEnd(20 * time.Second)
		if e.Status != "" && e.Status != "1" { // CANCELLED
			t.Errorf("stream %d ended with grpc-status %s, want 1 (CANCELLED)", e.ID, e.Status)
		}
		got[e.ID] = true
	}
	if !got[nothing] || !got[part] {
		t.Fatalf("ended streams %v, want %d and %d", got, nothing, part)
	}
	// The connection goes on serving.
	client, _ := dial(t, d)
	if _, err := client.ShouldRateLimit(context.Background(), req("default", desc("path", "/orders"))); err != nil {
		t.Fatalf("a call after the late ones: %v", err)
	}
}

// TestWaitingStreamsBounded: with as many calls waiting for their message
// as the limit allows, one more ends the call waiting longest, and its
// connection is paced from then on (internal/transport/readpace), and so is a new
// connection from the same address; another caller's connection is not.
func TestWaitingStreamsBounded(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) {
		c.Limits.MaxWaitingStreams = 2
		c.Limits.MessageTimeout = time.Hour
	})
	c := dialH2From(t, "127.0.0.2", d.GRPCAddr())
	var ids []uint32
	for range 3 {
		id := c.open(v1Method)
		c.sendPart(id, 1000, 10)
		ids = append(ids, id)
	}
	if e := c.nextEnd(10 * time.Second); e.ID != ids[0] {
		t.Fatalf("stream %+v ended, want the oldest, %d", e, ids[0])
	}
	if m := scrape(t, d); m[`ratelimitd_waiting_requests{port="grpc"}`] != 2 || m[`ratelimitd_waiting_ended_total{port="grpc",reason="evicted"}`] != 1 {
		t.Errorf("waiting %v, evicted %v; want 2 and 1", m[`ratelimitd_waiting_requests{port="grpc"}`], m[`ratelimitd_waiting_ended_total{port="grpc",reason="evicted"}`])
	}
	wait.For(t, "the connection paced", func() bool { return scrape(t, d)[`ratelimitd_connections_paced{port="grpc"}`] == 1 })
	client, _ := dial(t, d)
	if _, err := client.ShouldRateLimit(context.Background(), req("default", desc("path", "/orders"))); err != nil {
		t.Fatalf("a call on another connection: %v", err)
	}
	if got := scrape(t, d)[`ratelimitd_connections_paced{port="grpc"}`]; got != 1 {
		t.Errorf("%v connections paced after a call on another, want 1", got)
	}
	// The address whose call was ended connects again: paced from the start.
	successor := rl.NewRateLimitServiceClient(dialFrom(t, d, "127.0.0.2"))
	if _, err := successor.ShouldRateLimit(context.Background(), req("default", desc("path", "/orders"))); err != nil {
		t.Fatalf("a call on a new connection of the paced address: %v", err)
	}
	if got := scrape(t, d)[`ratelimitd_connections_paced{port="grpc"}`]; got != 2 {
		t.Errorf("%v connections paced after the paced address connected again, want 2", got)
	}
}

// TestMessageSizeFromBounds: the gRPC port takes the largest request the
// bounds allow, and refuses a message larger than MaxMessageBytes
// (ResourceExhausted) on its prefix, without waiting for its bytes.
func TestMessageSizeFromBounds(t *testing.T) {
	d := daemontest.Start(t, "")
	limit := daemon.MaxMessageBytes(engine.DefaultBounds)
	if limit != 1_361_152 { // as documented
		t.Fatalf("MaxMessageBytes(DefaultBounds) = %d, want 1,361,152", limit)
	}
	// The largest request the bounds allow, every field at its longest (an
	// inline limit with a name, hits set everywhere), fits.
	b := engine.DefaultBounds
	largest := &rl.ShouldRateLimitRequest{Domain: strings.Repeat("d", b.MaxKeyBytes), Hits: math.MaxUint32}
	for i := range b.MaxDescriptors {
		d := &rl.Descriptor{Hits: proto.Uint32(math.MaxUint32), Limit: &rl.Limit{
			Algorithm: rl.Algorithm_ALGORITHM_LEAKY_BUCKET_QUEUE, Requests: math.MaxUint32, Burst: math.MaxUint32,
			Period: &durationpb.Duration{Seconds: math.MaxInt64, Nanos: 999_999_999}, Name: strings.Repeat("n", b.MaxKeyBytes)}}
		for j := range b.MaxEntries {
			d.Entries = append(d.Entries, &rl.Entry{Key: fmt.Sprintf("%0*d", b.MaxKeyBytes, j), Value: fmt.Sprintf("%0*d", b.MaxValueBytes, i)})
		}
		largest.Descriptors = append(largest.Descriptors, d)
	}
	if n := proto.Size(largest); n > limit {
		t.Fatalf("the largest request within the bounds is %d bytes, over MaxMessageBytes %d", n, limit)
	}
	client, _ := dial(t, d)
	if _, err := client.ShouldRateLimit(context.Background(), largest); status.Code(err) == codes.ResourceExhausted {
		t.Fatalf("the largest request within the bounds: %v", err) // (its absurd limits may be InvalidArgument: not its size)
	}
	c := dialH2(t, d.GRPCAddr())
	id := c.open(v1Method)
	c.sendPart(id, limit+1, 0)
	if e := c.nextEnd(10 * time.Second); e.ID != id || e.Status != "8" { // RESOURCE_EXHAUSTED
		t.Fatalf("stream ended %+v, want %d with grpc-status 8 (RESOURCE_EXHAUSTED)", e, id)
	}
}

// TestAuthzBeforeMessage: with an authorization policy, a call without a
// token, or with a bad one, is refused on its headers alone: the daemon
// never waits for (nor reads) its message.
func TestAuthzBeforeMessage(t *testing.T) {
	dir := t.TempDir()
	authzPath := filepath.Join(dir, "authz.yaml")
	writeFile(t, authzPath, "clients:\n  - name: batch\n    match: [{tokens: batch.tokens}]\n    grants: [{domains: [default], access: charge}]\n")
	writeFile(t, filepath.Join(dir, "batch.tokens"), batchToken+"\n")
	d := daemontest.StartConfig(t, daemon.Config{AuthzPolicy: authzPath})
	c := dialH2(t, d.GRPCAddr())
	for _, extra := range [][]string{nil, {"authorization", "Bearer not-a-token-at-all"}, {"authorization", "Basic x"}} {
		id := c.open(v1Method, extra...)
		if e := c.nextEnd(10 * time.Second); e.ID != id || e.Status != "16" { // UNAUTHENTICATED
			t.Fatalf("%v: stream ended %+v, want %d refused with grpc-status 16 before any message", extra, e, id)
		}
	}
	// A known caller's call waits for its message, and is decided.
	id := c.open(v1Method, "authorization", "Bearer "+batchToken)
	c.sendPart(id, 1000, 10)
	c.Fr.WriteRSTStream(id, http2.ErrCodeCancel)
	if got := scrape(t, d)[`ratelimitd_authz_denied_total{reason="no_credentials"}`]; got != 1 {
		t.Errorf("no_credentials refusals %v, want 1", got)
	}
}

// TestGRPCConnectionsBounded: with as many connections open as the limit,
// a new one closes the one idle longest — a connection whose only call is
// still waiting for its message is idle — and when every one is busy (a
// call being decided), the new one is closed.
func TestGRPCConnectionsBounded(t *testing.T) {
	release := make(chan struct{})
	hold := func(ctx context.Context, r any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r.(*rl.ShouldRateLimitRequest).Descriptors[0].Entries[0].Value == "/hold" {
			<-release
		}
		return h(ctx, r)
	}
	d := daemontest.Start(t, "", func(c *daemon.Config) {
		c.Limits.MaxConnections = 2
		c.Limits.MessageTimeout = time.Hour
		c.UnaryInterceptors = []grpc.UnaryServerInterceptor{hold}
	})
	first := dialH2(t, d.GRPCAddr())
	first.sendPart(first.open(v1Method), 1000, 10) // waiting for the rest of its message
	held := make(chan error, 2)
	holdOn := func(c rl.RateLimitServiceClient) {
		go func() {
			_, err := c.ShouldRateLimit(context.Background(), req("default", desc("path", "/hold")))
			held <- err
		}()
	}
	a, _ := dial(t, d)
	holdOn(a)
	wait.For(t, "a call held", func() bool { return scrape(t, d)[`ratelimitd_connections_busy{port="grpc"}`] == 1 })

	b, _ := dial(t, d) // a third connection, with a call to make
	if _, err := b.ShouldRateLimit(context.Background(), req("default", desc("path", "/orders"))); err != nil {
		t.Fatalf("a call on a new connection with the limit reached: %v", err)
	}
	if !closedByServer(first.Conn.Conn) {
		t.Fatal("the connection whose call waits for its message is still open")
	}
	holdOn(b)
	wait.For(t, "both connections busy", func() bool { return scrape(t, d)[`ratelimitd_connections_busy{port="grpc"}`] == 2 })
	if !closedByServer(dialTCP(t, d.GRPCAddr())) {
		t.Fatal("a connection beyond the limit, every one busy, is open")
	}
	close(release)
	for range 2 {
		if err := <-held; err != nil {
			t.Errorf("a held call: %v", err)
		}
	}
	m := scrape(t, d)
	if m[`ratelimitd_connections_evicted_total{port="grpc"}`] != 1 || m[`ratelimitd_connections_refused_total{port="grpc"}`] != 1 {
		t.Errorf("evicted %v, refused %v; want 1 and 1", m[`ratelimitd_connections_evicted_total{port="grpc"}`], m[`ratelimitd_connections_refused_total{port="grpc"}`])
	}
}

// TestHTTPConnectionsBounded: the HTTP port, too, closes the connection
// idle longest to make room for a new one.
func TestHTTPConnectionsBounded(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) { c.Limits.MaxConnections = 2 })
	idle := []net.Conn{dialTCP(t, d.HTTPAddr()), dialTCP(t, d.HTTPAddr())}
	code, _ := d.Get(t, "/readyz")
	if code != http.StatusOK {
		t.Fatalf("/readyz on a third connection: %d", code)
	}
	if !closedByServer(idle[0]) {
		t.Fatal("the connection idle longest is still open")
	}
}

// TestIdleConnectionsClosed: a connection that says nothing, or that
// stays idle after a call, is closed after the limits' timeouts, on both
// ports.
func TestIdleConnectionsClosed(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) {
		c.Limits.HeaderTimeout = 200 * time.Millisecond
		c.Limits.IdleTimeout = 200 * time.Millisecond
	})
	t.Run("HTTP, nothing sent", func(t *testing.T) {
		if !closedByServer(dialTCP(t, d.HTTPAddr())) {
			t.Error("open")
		}
	})
	t.Run("HTTP, idle after a request", func(t *testing.T) {
		conn := dialTCP(t, d.HTTPAddr())
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%v %v", resp, err)
		}
		if !closedByServer(conn) {
			t.Error("open")
		}
	})
	t.Run("gRPC, no preface", func(t *testing.T) {
		if !closedByServer(dialTCP(t, d.GRPCAddr())) {
			t.Error("open")
		}
	})
	t.Run("gRPC, no call", func(t *testing.T) {
		c := dialH2(t, d.GRPCAddr())
		for {
			f := c.read(20 * time.Second)
			if g, ok := f.(*http2.GoAwayFrame); ok {
				if g.ErrCode != http2.ErrCodeNo {
					t.Errorf("GOAWAY %v, want NO_ERROR", g.ErrCode)
				}
				return
			}
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closedByServer reports whether the server has closed conn: a read ends
// with EOF or a reset (after any bytes it sent first) within 10s.
func closedByServer(conn net.Conn) bool { return closedWithin(conn, 10*time.Second) }

// closedWithin reports whether the server closes conn within wait.
func closedWithin(conn net.Conn, wait time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, conn)
	return !isTimeout(err)
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestHTTPBodiesBounded: with as many decision bodies on their way as the
// limit allows, one more cuts off the one read longest (its connection
// closed); a body that does not arrive within the message timeout is cut
// off too.
func TestHTTPBodiesBounded(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) {
		c.Limits.MaxWaitingBodies = 1
		c.Limits.MessageTimeout = time.Hour
	})
	partBody := func() net.Conn {
		conn := dialTCP(t, d.HTTPAddr())
		io.WriteString(conn, "POST /json HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"domain\":")
		return conn
	}
	first := partBody()
	wait.For(t, "the first body waiting", func() bool { return scrape(t, d)[`ratelimitd_waiting_requests{port="http"}`] == 1 })
	second := partBody()
	if !closedWithin(first, 5*time.Second) { // (well within 10s, the body timeout before --message-timeout)
		t.Fatal("the body read longest was not cut off")
	}
	if m := scrape(t, d); m[`ratelimitd_waiting_ended_total{port="http",reason="evicted"}`] != 1 {
		t.Errorf("evicted %v, want 1", m[`ratelimitd_waiting_ended_total{port="http",reason="evicted"}`])
	}
	second.Close()

	late := daemontest.Start(t, "", func(c *daemon.Config) { c.Limits.MessageTimeout = 200 * time.Millisecond })
	conn := dialTCP(t, late.HTTPAddr())
	io.WriteString(conn, "POST /json HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	if !closedByServer(conn) {
		t.Fatal("a body that never arrives was not cut off")
	}
}
