package rlqsapi_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// onRedis makes a daemon keep its buckets and its quota ledger in the
// Redis at addr, on clk.
func onRedis(addr string, clk *clock.Fake) func(*daemon.Config) {
	return func(c *daemon.Config) {
		c.Clock, c.Store = clk, "redis"
		c.Redis = redisstore.Config{Addr: addr, Timeout: 2 * time.Second, Clock: clk, Linger: redisstore.MaxLinger}
	}
}

// metric returns the value of the daemon's metric line that starts with
// series (0 when absent).
func metric(t *testing.T, d *daemontest.Daemon, series string) float64 {
	t.Helper()
	_, body := d.Get(t, "/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSharedWithAnotherDaemon: two daemons on one Redis divide a limit
// between their clients as one daemon would: 600/min, half each.
func TestSharedWithAnotherDaemon(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(daemontest.T0.UnixNano())
	a := daemontest.Start(t, policy, onRedis(srv.Addr(), clk))
	b := daemontest.Start(t, policy, onRedis(srv.Addr(), clk))
	ea, eb := open(t, a), open(t, b)
	ea.report("shop", usage(1<<20, time.Second, "plan", "gold"))
	eb.report("shop", usage(1<<20, time.Second, "plan", "gold"))
	for _, d := range []*daemontest.Daemon{a, b} {
		wait.For(t, "the report", func() bool { v := d.Quota().View(); return len(v) == 1 && len(v[0].Clients) == 1 })
	}
	// Whatever came first, both settle at half within the assignments'
	// life: the clock moves a report interval at a time.
	for i := 0; ; i++ {
		for _, d := range []*daemontest.Daemon{a, b, a, b} {
			d.Quota().Tick()
		}
		ga, gb := a.Quota().View()[0].Clients[0].Share, b.Quota().View()[0].Clients[0].Share
		if ga == 300 && gb == 300 {
			break
		}
		if i == 4 {
			t.Fatalf("after %d intervals the daemons' clients hold %d and %d of 600/min, want 300 each", i, ga, gb)
		}
		clk.Advance(time.Second)
		ea.report("shop", usage(1<<20, time.Second, "plan", "gold"))
		eb.report("shop", usage(1<<20, time.Second, "plan", "gold"))
	}
	// The console's quota view says what this daemon holds of the limit,
	// and what the other's clients ask.
	if code, body := a.Get(t, "/console/api/quota"); code != 200 || !strings.Contains(body, `"shared":{"grant":300,"other_clients":1,"other_demand":`) {
		t.Errorf("the console's quota view of a shared bucket: %d %s", code, body)
	}
	want := "token_bucket max=1 fill=300/1m0s ttl=2s"
	for _, e := range []*envoy{ea, eb} { // the last action each received
		for describe(e.recv(1)["plan=gold"]) != want {
		}
	}
}

// TestLedgerUnreachable: a daemon that cannot reach the ledger renews its
// client's share while its last grant holds for the assignment's whole
// life (a report interval of 1s: a TTL of 2s and a quarter interval),
// then answers no more; it says so
// once in its log and counts the failed claims; when Redis is back it
// answers again.
func TestLedgerUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	clk := clock.NewFake(daemontest.T0.UnixNano())
	d := daemontest.Start(t, policy, onRedis(proxy.Addr(), clk))
	e := open(t, d)
	shares := `ratelimitd_quota_assignments_total{action="share",domain="shop"}`
	report := func() {
		reported := metric(t, d, `ratelimitd_quota_reports_total{domain="shop"}`)
		e.report("shop", usage(1<<20, time.Second, "plan", "gold"))
		wait.For(t, "the report", func() bool { return metric(t, d, `ratelimitd_quota_reports_total{domain="shop"}`) > reported })
		d.Quota().Tick() // publishes the report's demand
		d.Quota().Tick() // claims, and answers
	}
	report()
	if g := describe(e.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=600/1m0s ttl=2s" {
		t.Fatalf("the lone client: %s, want all of 600/min", g)
	}
	// The last grant: claimed now, its lease 2.25s + 2s.
	proxy.SetDown(true)
	for _, step := range []struct {
		at       time.Duration
		answered bool
	}{{time.Second, true}, {2 * time.Second, true}, {3 * time.Second, false}, {4 * time.Second, false}} {
		before := metric(t, d, shares)
		clk.Set(daemontest.T0.UnixNano() + int64(step.at))
		report()
		if got := metric(t, d, shares) > before; got != step.answered {
			t.Fatalf("%v after the last grant, Redis down: answered %v, want %v", step.at, got, step.answered)
		}
	}
	if n := metric(t, d, `ratelimitd_quota_ledger_claims_total{result="error"}`); n < 4 {
		t.Errorf("%v failed claims counted, want at least 4", n)
	}
	if n := strings.Count(d.Logs(), "the ledger of shares is unreachable"); n != 1 {
		t.Errorf("the ledger's failure logged %d times, want once:\n%s", n, d.Logs())
	}
	proxy.SetDown(false)
	before := metric(t, d, shares)
	for i := 0; metric(t, d, shares) == before; i++ { // the client's connection to Redis comes back
		if i == 10 {
			t.Fatal("not answered again 10 intervals after Redis came back")
		}
		clk.Advance(time.Second)
		report()
	}
	if !strings.Contains(d.Logs(), "the ledger of shares answers again") {
		t.Errorf("the ledger's recovery not logged:\n%s", d.Logs())
	}
}
