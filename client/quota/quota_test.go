package quota_test

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/client/quota"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const policy = `
domain: shop
descriptors:
  - key: route
    value: checkout
    rate_limit: {unit: minute, requests_per_unit: 600}
`

// TestAssignedAndEnforced: the first request, allowed by the fallback,
// subscribes the bucket and is reported at once; the assignment for that
// demand (1 request in an interval of 1s: 60/min, a burst of 1, 60 tokens
// per minute) is then enforced locally, starting full: one admitted, the
// next denied.
func TestAssignedAndEnforced(t *testing.T) {
	d := daemontest.Start(t, policy)
	q, err := quota.New(d.GRPCAddr(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	b := q.Bucket("route", "checkout")
	if !b.Allow(context.Background()) {
		t.Fatal("the first request, before any assignment, was denied (the default fallback allows)")
	}
	wait.For(t, "the assignment", func() bool { _, _, _, _, ok := b.Assignment(); return ok })
	maxTokens, per, fill, _, _ := b.Assignment()
	if maxTokens != 1 || per != 60 || fill != time.Minute {
		t.Fatalf("assignment: %d tokens, %d per %v; want 1, 60 per 1m0s", maxTokens, per, fill)
	}
	if !b.Allow(context.Background()) || b.Allow(context.Background()) {
		t.Fatal("a full bucket of 1 did not admit exactly 1 of 2 at once")
	}
	if q.Bucket("route", "checkout") != b {
		t.Fatal("the same pairs gave another Bucket")
	}
}

// TestWaitForTheFirstAssignment: Wait reports a bucket no request has
// touched and returns once its assignment is in force, so that no request
// is decided by the fallback; the assignment names its rule; a context that
// ends first ends the wait with its error.
func TestWaitForTheFirstAssignment(t *testing.T) {
	d := daemontest.Start(t, policy)
	q, err := quota.New(d.GRPCAddr(), "shop", quota.WithFallback(quota.DenyAll))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	b := q.Bucket("route", "checkout")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	maxTokens, per, fill, rule, ok := b.Assignment()
	if !ok || rule != "TOKEN_BUCKET" || maxTokens < 1 || per < 1 || fill != time.Minute {
		t.Fatalf("after Wait: %d tokens, %d per %v, rule %q, in force %v; want a TOKEN_BUCKET filled every 1m0s", maxTokens, per, fill, rule, ok)
	}
	if !b.Allow(context.Background()) {
		t.Fatal("the first request after Wait was denied: decided by the fallback (deny all), not the assignment")
	}
	if err := b.Wait(context.Background()); err != nil {
		t.Fatalf("Wait once assigned: %v", err)
	}

	// A server that never answers: the deadline ends the wait.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	silent, err := quota.New(l.Addr().String(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := silent.Bucket("route", "checkout").Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a server that never answers: %v, want context.DeadlineExceeded", err)
	}
}

// TestOneReportPerInterval: however many decisions, the daemon gets one
// report for the bucket per interval (and the first at once).
func TestOneReportPerInterval(t *testing.T) {
	d := daemontest.Start(t, policy)
	const interval = 100 * time.Millisecond
	q, err := quota.New(d.GRPCAddr(), "shop", quota.WithInterval(interval))
	if err != nil {
		t.Fatal(err)
	}
	b := q.Bucket("route", "checkout")
	ctx := context.Background()
	began := time.Now()
	n := 0
	for time.Since(began) < 5*interval {
		for range 1000 {
			b.Allow(ctx)
			n++
		}
	}
	q.Close()
	took := time.Since(began)
	got := reports(t, d)
	if most := int(took/interval) + 2; got < 2 || got > most {
		t.Fatalf("%d decisions in %v gave %d reports, want 2 to %d", n, took, got, most)
	}
}

var reportsRE = regexp.MustCompile(`ratelimitd_quota_reports_total\{domain="shop"\} (\d+)`)

func reports(t *testing.T, d *daemontest.Daemon) int {
	t.Helper()
	_, body := d.Get(t, "/metrics")
	m := reportsRE.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// proxy forwards connections to addr until cut.
type proxy struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, addr string) *proxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) cut() {
	p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// TestStreamBreaks: when the stream breaks, the last assignment stays in
// force until its time to live runs out (1.5 report intervals rounded up
// to whole seconds after it was received: 2s), then the fallback applies
// (here: deny all).
func TestStreamBreaks(t *testing.T) {
	d := daemontest.Start(t, policy)
	p := newProxy(t, d.GRPCAddr())
	const interval = time.Second // renewed every second, for 2s: at least 1s left at the cut
	q, err := quota.New(p.lis.Addr().String(), "shop", quota.WithInterval(interval), quota.WithFallback(quota.DenyAll))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	b := q.Bucket("route", "checkout")
	ctx := context.Background()
	if b.Allow(ctx) {
		t.Fatal("the first request was allowed with the fallback deny all")
	}
	// The second report says the interval: the TTL is then 1.5 × 1s, 2s.
	wait.For(t, "the second report", func() bool { return reports(t, d) >= 2 })
	wait.For(t, "the assignment", func() bool { _, _, _, _, ok := b.Assignment(); return ok })
	p.cut()
	if _, _, _, _, ok := b.Assignment(); !ok {
		t.Fatal("the assignment was dropped as the stream broke")
	}
	if !b.Allow(ctx) {
		t.Fatal("denied right after the stream broke, with the last assignment in force")
	}
	wait.For(t, "the assignment to expire", func() bool { _, _, _, _, ok := b.Assignment(); return !ok })
	if b.Allow(ctx) {
		t.Fatal("allowed after the assignment expired, with the fallback deny all")
	}
}

// TestAsk: with AskPerRequest, a request without an assignment is decided
// by the function given, with the bucket's pairs sorted by key.
func TestAsk(t *testing.T) {
	var got []string
	q, err := quota.New("127.0.0.1:1", "shop", quota.WithAsk(func(_ context.Context, pairs []string) bool {
		got = pairs
		return false
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.Bucket("user", "alice", "route", "checkout").Allow(context.Background()) {
		t.Fatal("allowed; ask said no")
	}
	if want := []string{"route", "checkout", "user", "alice"}; len(got) != 4 || got[0] != want[0] || got[3] != want[3] {
		t.Fatalf("asked with %v, want %v", got, want)
	}
}

// TestPolicyFallback: without WithFallback, the client takes the domain's
// quota_fallback from the policy with the stream's first response, and a
// bucket with no assignment yet then allows, denies, or asks the service
// (which charges the per-request bucket: here already spent, so denied);
// an option overrides the policy.
func TestPolicyFallback(t *testing.T) {
	for _, tc := range []struct {
		fallback string
		opts     []quota.Option
		want     bool
	}{
		{"allow", nil, true},
		{"deny", nil, false},
		{"ask", nil, false},
		{"deny", []quota.Option{quota.WithFallback(quota.AllowAll)}, true},
	} {
		t.Run(tc.fallback, func(t *testing.T) {
			d := daemontest.Start(t, "domain: shop\nquota_fallback: "+tc.fallback+`
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
			// Spend route=checkout's per-request bucket.
			rl := ratelimitv1.NewRateLimitServiceClient(d.Dial(t))
			if _, err := rl.ShouldRateLimit(context.Background(), &ratelimitv1.ShouldRateLimitRequest{Domain: "shop",
				Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{{Key: "route", Value: "checkout"}}}}}); err != nil {
				t.Fatal(err)
			}
			q, err := quota.New(d.GRPCAddr(), "shop", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			warm := q.Bucket("route", "warmup")
			warm.Allow(context.Background())
			wait.For(t, "the first assignment", func() bool { _, _, _, _, ok := warm.Assignment(); return ok })
			if got := q.Bucket("route", "checkout").Allow(context.Background()); got != tc.want {
				t.Fatalf("a bucket without an assignment, quota_fallback %s: allowed %v, want %v", tc.fallback, got, tc.want)
			}
		})
	}
}
