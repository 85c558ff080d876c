// Package quotasim runs quota clients of one bucket against real daemons
// (daemontest), over real gRPC streams, on the daemons' fake clock, and
// measures what they admit together: for tests that hold the RLQS server's
// assignments to a client's real arithmetic (Envoy's filter, modelled by
// envoyfilter; the Go client, client/quota).
//
// Time moves in ticks of a tenth of the report interval R. At each tick
// every daemon rebalances (Tick) and the clients apply what they were sent
// before deciding the tick's requests; each client's requests of an
// interval arrive evenly spaced; at the end of each interval every client
// reports, and (with a ledger) the daemons tick three times more. Requests
// a client admits are recorded with their instant, and whether an
// assignment was in force.
package quotasim

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/internal/api/rlqsapi"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// Local is one client's local decisions for the bucket.
type Local interface {
	// Request decides one request at now: admitted; first, the bucket is
	// new and is to be reported at once; assigned, an assignment was in
	// force (else the client's fallback decided).
	Request(now int64) (admitted, first, assigned bool)
	// Receive applies a server's action at now.
	Receive(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now int64)
	// Report returns the usage to report at now (nil: none).
	Report(bucket map[string]string, now int64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	// Starts returns the token buckets the client applied, in order:
	// when, their max tokens, and whether each started full (Envoy's
	// always do; the Go client's carry the tokens left over).
	Starts() []Start
	// Applies describes the assignment in force at now (ok false: none).
	Applies(now int64) (maxTokens, tokensPerFill uint32, fill time.Duration, denyAll, ok bool)
}

// Start is a token bucket applied from At, holding at most MaxTokens;
// Full: it started full.
type Start struct {
	At        int64
	MaxTokens int64
	Full      bool
}

// Scenario is what Run runs.
type Scenario struct {
	// Daemons serve the clients (the i-th client on Daemons[i %
	// len(Daemons)]); they share one fake clock, Daemons[0].Clock.
	Daemons []*daemontest.Daemon
	// Limit requests per Period is the bucket's limit in the daemons'
	// policy; Domain and Bucket name it; R is the clients' report interval.
	Limit          int64
	Period, R      time.Duration
	Domain         string
	Bucket         map[string]string
	NewLocal       func(origin int64) Local
	Clients        int
	Phases         [][]int64 // per phase, each client's requests per R
	IntervalsEach  int       // report intervals per phase
	Ledger         bool      // the daemons share the limit through a ledger: tick thrice after reports
	CheckFairAfter int       // intervals after a phase's first report from which shares are checked
}

// Result is what the clients admitted.
type Result struct {
	Start, End int64
	// Admitted are the instants of admitted requests (sorted) and whether
	// an assignment was in force for each.
	Admitted []Admission
	// Starts are each client's token buckets applied.
	Starts [][]Start
	// Unfair lists the shares found outside 10% of max-min fair, two
	// intervals after each change.
	Unfair []string
}

// Admission is one admitted request.
type Admission struct {
	At       int64
	Assigned bool
}

type client struct {
	name   string
	daemon *daemontest.Daemon
	addr   string
	open   func() error
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient

	mu      sync.Mutex
	local   Local
	replies int
}

// Run runs the scenario and returns what the clients admitted.
func Run(t testing.TB, sc Scenario) Result {
	t.Helper()
	clk := sc.Daemons[0].Clock
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := clk.Now()
	clients := make([]*client, sc.Clients)
	for i := range clients {
		c := &client{name: fmt.Sprintf("client%03d", i), daemon: sc.Daemons[i%len(sc.Daemons)], local: sc.NewLocal(start)}
		conn, err := grpc.NewClient(c.daemon.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err == nil {
					c.addr = nc.LocalAddr().String()
				}
				return nc, err
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		c.open = func() error { // with the first report, as Envoy opens it
			var err error
			if c.stream, err = rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx); err == nil {
				go c.receive(clk.Now)
			}
			return err
		}
		clients[i] = c
	}
	res := Result{Start: start}
	const ticks = 10
	interval := 0
	for p, demands := range sc.Phases {
		for step := range sc.IntervalsEach {
			began := start + int64(interval)*int64(sc.R)
			for k := range ticks {
				now := began + int64(sc.R)*int64(k)/ticks
				next := began + int64(sc.R)*int64(k+1)/ticks
				clk.Set(now)
				for _, d := range sc.Daemons {
					d.Quota().Tick()
				}
				settle(t, sc, clients, now)
				for i, c := range clients {
					n := demands[i]
					for j := range n { // arrivals evenly spaced over the interval
						at := began + int64(sc.R)*j/n
						if at < now || at >= next {
							continue
						}
						c.mu.Lock()
						ok, first, assigned := c.local.Request(at)
						replies := c.replies
						c.mu.Unlock()
						if ok {
							res.Admitted = append(res.Admitted, Admission{at, assigned})
						}
						if first {
							c.report(t, sc, at, true)
							if !sc.Ledger { // else answered after the ledger's ticks
								waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.replies > replies }, c.name+"'s first assignment")
							}
						}
					}
				}
			}
			interval++
			end := start + int64(interval)*int64(sc.R)
			clk.Set(end)
			replies := make([]int, len(clients))
			reported := make([]bool, len(clients))
			for i, c := range clients {
				c.mu.Lock()
				replies[i] = c.replies
				c.mu.Unlock()
				reported[i] = c.report(t, sc, end, false)
			}
			if sc.Ledger {
				for range 3 {
					for _, d := range sc.Daemons {
						d.Quota().Tick()
					}
				}
			}
			for i, c := range clients {
				if reported[i] {
					waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.replies > replies[i] }, c.name+"'s reply")
				}
			}
			settle(t, sc, clients, end)
			if step >= sc.CheckFairAfter {
				res.Unfair = append(res.Unfair, unfair(fmt.Sprintf("phase %d interval %d", p, step), sc, clients, demands)...)
			}
		}
	}
	res.End = start + int64(interval)*int64(sc.R)
	for _, c := range clients {
		c.mu.Lock()
		res.Starts = append(res.Starts, c.local.Starts())
		c.mu.Unlock()
	}
	slices.SortFunc(res.Admitted, func(a, b Admission) int { return int(a.At - b.At) })
	return res
}

func (c *client) receive(now func() int64) {
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			return
		}
		c.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			c.local.Receive(a, now())
			c.replies++
		}
		c.mu.Unlock()
	}
}

// report sends the client's report at now (the domain with the first);
// it reports whether there was one.
func (c *client) report(t testing.TB, sc Scenario, now int64, first bool) bool {
	c.mu.Lock()
	u := c.local.Report(sc.Bucket, now)
	c.mu.Unlock()
	if u == nil {
		return false
	}
	if c.stream == nil {
		if err := c.open(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: sc.Domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u}}); err != nil {
		t.Fatal(err)
	}
	return true
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// view is a client of the bucket in a daemon's view, and its client.
type view struct {
	quota.ClientView
	c *client
}

func views(sc Scenario, clients []*client) []view {
	var vs []view
	for _, d := range sc.Daemons {
		for _, b := range d.Quota().View() {
			for _, cv := range b.Clients {
				var found *client
				for _, c := range clients {
					if c.daemon == d && c.addr == b.Peers[cv.Client] {
						found = c
					}
				}
				vs = append(vs, view{cv, found})
			}
		}
	}
	return vs
}

// settle waits until every client the daemons know applies the share its
// daemon last gave it, or has not been answered yet.
func settle(t testing.TB, sc Scenario, clients []*client, now int64) {
	t.Helper()
	var why string
	deadline := time.Now().Add(20 * time.Second)
	for why = unsettled(sc, clients, now); why != ""; why = unsettled(sc, clients, now) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the clients to apply their shares: %s", why)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func unsettled(sc Scenario, clients []*client, now int64) string {
	for _, v := range views(sc, clients) {
		if v.c == nil || !v.Live {
			continue
		}
		v.c.mu.Lock()
		maxTokens, perFill, fill, denyAll, ok := v.c.local.Applies(now)
		v.c.mu.Unlock()
		if !ok && v.Share == 0 {
			continue // not answered yet (a ledger's), or its fallback
		}
		want := "deny all"
		if v.Share > 0 {
			tokens, every := rlqsapi.FillInterval(v.Share, sc.Period)
			want = fmt.Sprintf("%d tokens, %d per %v", v.Burst, tokens, every)
		}
		got := fmt.Sprintf("%d tokens, %d per %v", maxTokens, perFill, fill)
		if denyAll {
			got = "deny all"
		}
		if !ok {
			got = "nothing"
		}
		if got != want {
			return fmt.Sprintf("%s applies %s; its daemon gave %+v (%s)", v.c.name, got, v.ClientView, want)
		}
	}
	return ""
}

// unfair returns the shares not within 10% of their max-min fair shares
// of the limit (each demand at least 1), or starved, or adding up to more
// than the limit.
func unfair(what string, sc Scenario, clients []*client, demands []int64) []string {
	ds := make([]int64, len(demands))
	for i, d := range demands {
		ds[i] = max(d*int64(sc.Period)/int64(sc.R), 1)
	}
	fair := quota.MaxMinFair(sc.Limit, ds)
	var bad []string
	var sum int64
	for _, v := range views(sc, clients) {
		i := slices.Index(clients, v.c)
		if i < 0 || !v.Live {
			continue
		}
		sum += v.Share
		if d := v.Share - fair[i]; d*10 > fair[i] || -d*10 > fair[i] || v.Share == 0 {
			bad = append(bad, fmt.Sprintf("%s: %s holds %d, max-min fair is %d (demand %d, read as %d)", what, v.c.name, v.Share, fair[i], ds[i], v.Demand))
		}
	}
	if sum > sc.Limit {
		bad = append(bad, fmt.Sprintf("%s: shares add up to %d > %d", what, sum, sc.Limit))
	}
	return bad
}

// Window is what the clients admitted in [From, From+Length).
type Window struct {
	From, Length int64
	// Admitted in it, and of those AdmittedUnassigned without an
	// assignment in force (the clients' fallback).
	Admitted, Unassigned int64
	// Rate is what the limit earns in the window: Limit × Length / Period.
	Rate int64
	// Bound is what the clients may admit beyond Rate under assignments:
	// the max tokens of each client's token bucket in force at From, and
	// of each token bucket started full in the window.
	Bound int64
	// NewBuckets is how many started in it.
	NewBuckets int
}

// Windows returns every window of length starting at a multiple of step
// within the run.
func (r Result) Windows(sc Scenario, length, step time.Duration) []Window {
	var ws []Window
	times := make([]int64, len(r.Admitted))
	for i, a := range r.Admitted {
		times[i] = a.At
	}
	for from := r.Start; from+int64(length) <= r.End; from += int64(step) {
		w := Window{From: from, Length: int64(length), Rate: sc.Limit * int64(length) / int64(sc.Period)}
		lo, _ := slices.BinarySearch(times, from)
		hi, _ := slices.BinarySearch(times, from+int64(length))
		for _, a := range r.Admitted[lo:hi] {
			w.Admitted++
			if !a.Assigned {
				w.Unassigned++
			}
		}
		for _, starts := range r.Starts {
			var inForce int64
			for _, s := range starts {
				switch {
				case s.At <= from:
					inForce = s.MaxTokens
				case s.At < from+int64(length) && s.Full:
					w.Bound += s.MaxTokens
					w.NewBuckets++
				}
			}
			w.Bound += inForce
		}
		ws = append(ws, w)
	}
	return ws
}

// Debug returns the daemons' views, for a failing test's log.
func Debug(sc Scenario) string {
	var s string
	for i, d := range sc.Daemons {
		for _, b := range d.Quota().View() {
			s += fmt.Sprintf("daemon %d: %+v\n", i, b.BucketView.Shared)
			for _, c := range b.Clients {
				s += fmt.Sprintf("  %+v\n", c)
			}
		}
	}
	return s
}
