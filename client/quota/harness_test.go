package quota

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/quotasim"
)

// local is the client's own code (Bucket.Allow, apply, abandon, report)
// for one bucket as a quotasim client, on the simulation's clock.
type local struct {
	c      *Client
	b      *Bucket
	at     int64
	last   map[*Bucket]int64
	starts []quotasim.Start
}

func newLocal(origin int64) quotasim.Local {
	l := &local{last: map[*Bucket]int64{}}
	l.c = &Client{domain: "mesh", interval: time.Second, buckets: map[string]*Bucket{}, fresh: make(chan struct{}, 1),
		clock: func() int64 { return l.at }}
	l.b = l.c.Bucket("route", "checkout")
	return l
}

func (l *local) Request(now int64) (admitted, first, assigned bool) {
	l.at = now
	a := l.b.assigned.Load()
	assigned = a != nil && now < a.until
	first = !l.b.subscribed.Load()
	return l.b.Allow(context.Background()), first, assigned
}

// Receive applies an action as the client's stream does; a token bucket
// that does not carry the tokens of one in force starts full.
func (l *local) Receive(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now int64) {
	l.at = now
	switch {
	case a.GetAbandonAction() != nil:
		l.b.abandon()
	case a.GetQuotaAssignmentAction() != nil:
		old := l.b.assigned.Load()
		l.b.apply(a.GetQuotaAssignmentAction(), now)
		carried := old != nil && old.every > 0 && old.until > now
		if n := l.b.assigned.Load(); n.every > 0 {
			l.starts = append(l.starts, quotasim.Start{At: now, MaxTokens: n.burst, Full: !carried})
		}
	}
}

// sent captures what report sends.
type sent struct {
	rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	msg *rlqsv3.RateLimitQuotaUsageReports
}

func (s *sent) Send(m *rlqsv3.RateLimitQuotaUsageReports) error { s.msg = m; return nil }

func (l *local) Report(_ map[string]string, now int64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	l.at = now
	var s sent
	if ok, _ := l.c.report(&s, false, l.last); !ok {
		return nil
	}
	return s.msg.GetBucketQuotaUsages()[0]
}

func (l *local) Starts() []quotasim.Start { return l.starts }

func (l *local) Applies(now int64) (uint32, uint32, time.Duration, bool, bool) {
	l.at = now
	m, per, fill, rule, ok := l.b.Assignment()
	return m, per, fill, rule == "DENY_ALL", ok
}

const harnessPolicy = `
domain: mesh
descriptors:
  - key: route
    value: checkout
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// TestSharesHeld runs N Go clients (their own Allow, apply and report, on
// the daemon's fake clock) against a real daemon, as rlqsapi's TestEnvoys
// runs Envoy's filter, and checks the client's own, tighter bound: in any
// window of one second, under assignments, at most the limit plus each
// client's max tokens in force at its start (a new assignment carries the
// tokens left over, so a client's token bucket starts full only with its
// first assignment, or after one expired: once here); two intervals after
// each change of demand every share within 10% of max-min fair.
func TestSharesHeld(t *testing.T) {
	for _, n := range []int{3, 10, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			sharesHeld(t, n, []*daemontest.Daemon{daemontest.Start(t, harnessPolicy)}, false)
		})
	}
}

// TestSharesHeldAcrossDaemons: the same, the clients spread over three
// daemons on one Redis, which share the limit through their ledger.
func TestSharesHeldAcrossDaemons(t *testing.T) {
	srv := redistest.Start(t)
	for _, n := range []int{3, 10, 99} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clk := clock.NewFake(daemontest.T0.UnixNano())
			daemons := make([]*daemontest.Daemon, 3)
			for i := range daemons {
				daemons[i] = daemontest.Start(t, harnessPolicy, func(c *daemon.Config) {
					c.Clock, c.Store = clk, "redis"
					c.Redis = redisstore.Config{Addr: srv.Addr(), Timeout: 2 * time.Second, KeyPrefix: fmt.Sprintf("held%d:", n),
						Clock: clk, Linger: redisstore.MaxLinger}
				})
			}
			sharesHeld(t, n, daemons, true)
		})
	}
}

func sharesHeld(t *testing.T, n int, daemons []*daemontest.Daemon, ledger bool) {
	h := 0.0
	for i := 1; i <= n; i++ {
		h += 1 / float64(i)
	}
	phase := func(f func(i int) float64) []int64 {
		d := make([]int64, n)
		for i := range d {
			d[i] = int64(f(i))
		}
		return d
	}
	sc := quotasim.Scenario{
		Daemons: daemons, Limit: 1000, Period: time.Second, R: time.Second,
		Domain: "mesh", Bucket: map[string]string{"route": "checkout"}, NewLocal: newLocal, Clients: n,
		Phases: [][]int64{
			phase(func(i int) float64 { return 2000 / float64(i+1) / h }),
			phase(func(i int) float64 { return 2000 / float64(n-i) / h }),
			phase(func(i int) float64 { return float64(i%2) * 4000 / float64(n+1) }),
		},
		IntervalsEach: 6, CheckFairAfter: 2, Ledger: ledger,
	}
	res := quotasim.Run(t, sc)
	var most quotasim.Window
	for _, w := range res.Windows(sc, time.Second, 10*time.Millisecond) {
		if w.Admitted > most.Admitted {
			most = w
		}
		if w.Admitted-w.Unassigned > w.Rate+w.Bound {
			t.Errorf("+%v: admitted %d under assignments > %d + bound %d (%d buckets started full)",
				time.Duration(w.From-res.Start), w.Admitted-w.Unassigned, w.Rate, w.Bound, w.NewBuckets)
		}
	}
	t.Logf("N=%d: the most admitted in 1s: %d of %d (bound %d, %d by fallback)", n, most.Admitted, most.Rate, most.Bound, most.Unassigned)
	for i, starts := range res.Starts {
		full := 0
		for _, s := range starts {
			if s.Full {
				full++
			}
		}
		if full != 1 {
			t.Errorf("client %d: its token bucket started full %d times, want once (it carries tokens over)", i, full)
		}
	}
	for _, u := range res.Unfair {
		t.Error(u)
	}
}
