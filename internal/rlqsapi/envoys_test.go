package rlqsapi_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/quota"
	"github.com/ratelimitd/ratelimitd/internal/rlqsapi"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// The simulated Envoys share one limit: L requests per P, reporting every
// R (the filter's reporting_interval), on the daemon's fake clock.
const (
	simL = 50_000
	simP = 10 * time.Second
	simR = time.Second
)

const simPolicy = `
domain: mesh
descriptors:
  - key: route
    value: checkout
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 50000}
`

// simEnvoy is one Envoy's rate_limit_quota filter for one bucket, as its
// documentation describes it: it reports the bucket at once on its first
// request, then every reporting_interval; an assignment with a new
// strategy starts a new token bucket, full (max_tokens is "also the number
// of tokens that the bucket initially contains"), one with the same
// strategy only extends the time to live; before the first assignment,
// and once one has expired, it allows all (no_assignment_behavior and
// expired_assignment_behavior left at their defaults). Tokens refill
// continuously at tokens_per_fill per fill_interval, as Envoy's token
// bucket does, kept exactly in units of 1/fill_interval-ns.
type simEnvoy struct {
	name   string
	daemon *daemontest.Daemon // the daemon it reports to
	addr   string             // the local address of its connection
	open   func() error
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	clock  interface{ Now() int64 }

	mu       sync.Mutex
	strategy *typev3.RateLimitStrategy
	until    int64 // the assignment's expiry
	replies  int   // actions received
	changes  int   // assignments received with a new strategy
	tokens   int64 // × fill interval ns
	last     int64 // when tokens were last refilled
	maxBurst int64 // the largest max_tokens applied since it was reset

	allowed, denied uint64 // since the last report
	unassigned      int64  // admitted with no assignment in force
}

func (e *simEnvoy) receive() {
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			return
		}
		now := e.clock.Now()
		e.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			q := a.GetQuotaAssignmentAction()
			e.replies++
			s := q.GetRateLimitStrategy()
			if e.strategy == nil || now >= e.until || !sameStrategy(s, e.strategy) {
				e.strategy, e.changes, e.last = s, e.changes+1, now
				if tb := s.GetTokenBucket(); tb != nil {
					e.tokens = int64(tb.GetMaxTokens()) * int64(tb.GetFillInterval().AsDuration())
					e.maxBurst = max(e.maxBurst, int64(tb.GetMaxTokens()))
				}
			}
			e.until = now + int64(q.GetAssignmentTimeToLive().AsDuration())
		}
		e.mu.Unlock()
	}
}

func sameStrategy(a, b *typev3.RateLimitStrategy) bool {
	ta, tb := a.GetTokenBucket(), b.GetTokenBucket()
	if ta == nil || tb == nil {
		return ta == nil && tb == nil && a.GetBlanketRule() == b.GetBlanketRule()
	}
	return ta.GetMaxTokens() == tb.GetMaxTokens() && ta.GetTokensPerFill().GetValue() == tb.GetTokensPerFill().GetValue() &&
		ta.GetFillInterval().AsDuration() == tb.GetFillInterval().AsDuration()
}

// request decides one request at now; it reports whether it needs an
// immediate report (the first request of a bucket with no assignment).
func (e *simEnvoy) request(now int64) (admitted, first bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.strategy == nil || now >= e.until {
		e.allowed++
		e.unassigned++
		return true, e.strategy == nil && e.replies == 0
	}
	tb := e.strategy.GetTokenBucket()
	if tb == nil {
		if e.strategy.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
			e.denied++
			return false, false
		}
		e.allowed++
		return true, false
	}
	fi := int64(tb.GetFillInterval().AsDuration())
	e.tokens = min(e.tokens+(now-e.last)*int64(tb.GetTokensPerFill().GetValue()), int64(tb.GetMaxTokens())*fi)
	e.last = now
	if e.tokens >= fi {
		e.tokens -= fi
		e.allowed++
		return true, false
	}
	e.denied++
	return false, false
}

func (e *simEnvoy) report(first bool, elapsed time.Duration) error {
	e.mu.Lock()
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"route": "checkout"}},
		NumRequestsAllowed: e.allowed, NumRequestsDenied: e.denied,
	}
	if !first {
		u.TimeElapsed = durationpb.New(elapsed)
	}
	e.allowed, e.denied = 0, 0
	e.mu.Unlock()
	r := &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u}}
	if first {
		r.Domain = "mesh"
		if err := e.open(); err != nil {
			return err
		}
	}
	return e.stream.Send(r)
}

// applied returns the token bucket in force: max tokens and fill interval
// (0, 0 for a blanket rule or none).
func (e *simEnvoy) applied() (int64, time.Duration, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	tb := e.strategy.GetTokenBucket()
	return int64(tb.GetMaxTokens()), tb.GetFillInterval().AsDuration(), e.replies
}

// TestEnvoys runs N simulated Envoys with skewed demand that changes every
// few intervals against a real daemon, over real gRPC streams, and checks
// in every period that all of them together admitted at most the limit
// plus the stated bound (package quota: Σ max_tokens × (1 + new token
// buckets) + what was admitted with no assignment), that two intervals
// after a change every share is within 10% of its max-min fair share, and
// that no Envoy is starved.
func TestEnvoys(t *testing.T) {
	for _, n := range []int{1, 10, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { runEnvoys(t, n, []*daemontest.Daemon{daemontest.Start(t, simPolicy)}) })
	}
}

// TestEnvoysAcrossDaemons: the same, the Envoys spread over three daemons
// on one Redis, which share the limit through the ledger (package quota,
// "Limits shared by several daemons"). The daemons share the test's clock;
// after each round of reports every daemon ticks three times (a daemon
// ticks every 100ms: ten times in a report interval).
func TestEnvoysAcrossDaemons(t *testing.T) {
	srv := redistest.Start(t)
	for _, n := range []int{3, 30, 99} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clk := clock.NewFake(daemontest.T0.UnixNano())
			daemons := make([]*daemontest.Daemon, 3)
			for i := range daemons {
				daemons[i] = daemontest.Start(t, simPolicy, func(c *daemon.Config) {
					c.Clock, c.QuotaLedgerClock, c.Store = clk, clk, "redis"
					c.Redis = redisstore.Config{Addr: srv.Addr(), Timeout: 2 * time.Second, KeyPrefix: fmt.Sprintf("envoys%d:", n)}
				})
			}
			runEnvoys(t, n, daemons)
		})
	}
}

// runEnvoys runs n Envoys, the i-th on daemons[i % len(daemons)]; the
// daemons share one clock.
func runEnvoys(t *testing.T, n int, daemons []*daemontest.Daemon) {
	d := daemons[0] // the clock's
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	envoys := make([]*simEnvoy, n)
	for i := range envoys {
		e := &simEnvoy{name: fmt.Sprintf("envoy%03d", i), clock: d.Clock, daemon: daemons[i%len(daemons)]}
		// A connection each, as separate Envoys have; its local address
		// finds it in the daemon's view.
		conn, err := grpc.NewClient(e.daemon.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err == nil {
					e.addr = c.LocalAddr().String()
				}
				return c, err
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		e.open = func() error { // the stream opens with the first report
			var err error
			if e.stream, err = rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx); err == nil {
				go e.receive()
			}
			return err
		}
		envoys[i] = e
	}
	// Demands in requests per period, skewed (the i-th asks ∝ 1/(i+1)),
	// together twice the limit, multiples of P/R so that each interval
	// carries whole requests; each phase changes them.
	perStep := int64(simP / simR)
	phases := []func(i int) int64{
		func(i int) int64 { return 2 * simL / int64(i+1) / harmonic(n) },    // skewed
		func(i int) int64 { return 2 * simL / int64(n-i) / harmonic(n) },    // reversed
		func(i int) int64 { return int64(i%2) * 4 * simL / int64(n+1) },     // half go quiet
		func(i int) int64 { return simL / int64(n) / 2 * int64(1+3*(i%3)) }, // three levels
	}
	const stepsPerPhase = 6
	start := d.Clock.Now()
	type window struct {
		admitted, bound int64
	}
	windows := map[int64]*window{}
	for p, phase := range phases {
		demand := make([]int64, n)
		for i := range demand {
			demand[i] = phase(i) / perStep * perStep
		}
		for step := range stepsPerPhase {
			now := d.Clock.Now()
			w := windows[(now-start)/int64(simP)]
			if w == nil {
				w = &window{}
				windows[(now-start)/int64(simP)] = w
				for _, e := range envoys { // bursts count afresh per window
					e.mu.Lock()
					e.changes, e.unassigned = 0, 0
					e.maxBurst = int64(e.strategy.GetTokenBucket().GetMaxTokens())
					e.mu.Unlock()
				}
			}
			// Arrivals over [now, now+R), evenly spaced.
			for i, e := range envoys {
				k := demand[i] / perStep
				for j := range k {
					at := now + int64(simR)*j/k // the daemon's clock stays at now
					ok, first := e.request(at)
					if ok {
						w.admitted++
					}
					if first { // reported at once; the assignment comes back before the next request
						if err := e.report(true, 0); err != nil {
							t.Fatal(err)
						}
						waitFor(t, func() bool { _, _, r := e.applied(); return r > 0 }, e.name+"'s first assignment")
					}
				}
			}
			// Everyone reports at the end of the interval.
			d.Clock.Set(now + int64(simR))
			replies := make([]int, n)
			for i, e := range envoys {
				_, _, replies[i] = e.applied()
				if err := e.report(false, simR); err != nil {
					t.Fatal(err)
				}
			}
			if len(daemons) > 1 { // the ledger's rounds
				for range 3 {
					for _, d := range daemons {
						d.Quota().Tick()
					}
				}
			}
			for i, e := range envoys { // each report has its reply
				waitFor(t, func() bool { _, _, r := e.applied(); return r > replies[i] }, e.name+"'s reply")
			}
			settle(t, daemons, envoys)
			// The bound of this window so far.
			var bound int64
			for _, e := range envoys {
				e.mu.Lock()
				bound += e.maxBurst*int64(1+e.changes) + e.unassigned
				e.mu.Unlock()
			}
			w.bound = bound
			if step >= 2 { // two intervals after the change
				checkFair(t, fmt.Sprintf("phase %d step %d", p, step), daemons, envoys, demand)
			}
		}
	}
	steps := int64(len(phases) * stepsPerPhase)
	for k := int64(0); k*perStep < steps; k++ {
		w := windows[k]
		if w.admitted > simL+w.bound {
			t.Errorf("period %d: admitted %d > limit %d + bound %d", k, w.admitted, simL, w.bound)
		}
		if (k+1)*perStep <= steps { // a whole period
			t.Logf("N=%d, period %d: admitted %d, limit %d + bound %d", n, k, w.admitted, simL, w.bound)
		}
	}
}

func harmonic(n int) int64 {
	var h float64
	for i := 1; i <= n; i++ {
		h += 1 / float64(i)
	}
	return int64(h + 1)
}

// clientView is a client of the bucket in a daemon's view, and its Envoy.
type clientView struct {
	quota.ClientView
	envoy *simEnvoy
}

// clients returns every daemon's clients of the bucket, with their Envoys
// (nil when not found).
func clients(daemons []*daemontest.Daemon, envoys []*simEnvoy) []clientView {
	var cs []clientView
	for _, d := range daemons {
		for _, v := range d.Quota().View() {
			for _, c := range v.Clients {
				cs = append(cs, clientView{c, envoyOf(envoys, d, v, c)})
			}
		}
	}
	return cs
}

// settle waits until every Envoy applies the share its daemon last gave
// it (pushes included).
func settle(t *testing.T, daemons []*daemontest.Daemon, envoys []*simEnvoy) {
	t.Helper()
	var unsettled string
	deadline := time.Now().Add(10 * time.Second)
	for unsettled = unsettledEnvoys(daemons, envoys); unsettled != ""; unsettled = unsettledEnvoys(daemons, envoys) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the Envoys to apply their shares: %s", unsettled)
		}
		time.Sleep(time.Millisecond)
	}
}

// unsettledEnvoys says which Envoy does not apply what its daemon last
// gave it, or "" when all do.
func unsettledEnvoys(daemons []*daemontest.Daemon, envoys []*simEnvoy) string {
	cs := clients(daemons, envoys)
	if len(cs) != len(envoys) {
		return fmt.Sprintf("the daemons have %d clients, not %d", len(cs), len(envoys))
	}
	for _, c := range cs {
		e := c.envoy
		if e == nil {
			return fmt.Sprintf("client %+v: no Envoy", c.ClientView)
		}
		burst, every, _ := e.applied()
		want := time.Duration(0)
		if c.Share > 0 {
			_, want = rlqsapi.FillInterval(c.Share, simP)
		} else {
			c.Burst = burst
		}
		if burst != c.Burst || every != want {
			return fmt.Sprintf("%s applies %d tokens every %v; its daemon gave %+v", e.name, burst, every, c.ClientView)
		}
	}
	return ""
}

// envoyOf finds the Envoy of a client of d's view by its address (the
// local address of its connection, which Envoys on different daemons may
// share).
func envoyOf(envoys []*simEnvoy, d *daemontest.Daemon, v rlqsapi.BucketView, c quota.ClientView) *simEnvoy {
	for _, e := range envoys {
		if e.daemon == d && e.addr == v.Peers[c.Client] {
			return e
		}
	}
	return nil
}

// checkFair checks every share is within 10% of the max-min fair share.
func checkFair(t *testing.T, what string, daemons []*daemontest.Daemon, envoys []*simEnvoy, demand []int64) {
	t.Helper()
	ds := make([]int64, len(demand))
	for i := range demand {
		ds[i] = max(demand[i], 1)
	}
	fair := quota.MaxMinFair(simL, ds)
	cs := clients(daemons, envoys)
	var sum int64
	for _, c := range cs {
		i := slices.Index(envoys, c.envoy)
		f := fair[i]
		sum += c.Share
		if diff := c.Share - f; diff*10 > f || -diff*10 > f {
			t.Errorf("%s: envoy %d holds %d (committed %d), max-min fair is %d (demand %d, the daemon read %d)", what, i, c.Share, c.Committed, f, ds[i], c.Demand)
		}
		if c.Share == 0 {
			t.Errorf("%s: envoy %d starved (demand %d)", what, i, ds[i])
		}
	}
	if sum > simL {
		t.Errorf("%s: shares add up to %d > %d", what, sum, simL)
	}
	if len(daemons) > 1 { // the ledger's grants, which bound the shares
		var grants int64
		for _, d := range daemons {
			for _, v := range d.Quota().View() {
				if v.Shared == nil {
					t.Errorf("%s: a daemon has no grant yet", what)
					continue
				}
				grants += v.Shared.Grant
			}
		}
		if grants > simL {
			t.Errorf("%s: the daemons' grants add up to %d > %d", what, grants, simL)
		}
	}
	if t.Failed() {
		for _, c := range cs {
			if c.Committed != c.Share || !c.Live {
				t.Logf("committed above its share, or not live: %+v", c)
			}
		}
		t.FailNow()
	}
}
