package rlqsapi_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const year = 365 * 24 * time.Hour

// TestElapsedBounded: a report that says a year elapsed is taken for one
// of a minute (quota.MaxInterval): its assignments live 90s, not a year
// and a half, and the share of a client that leaves goes to the others
// 1.75 minutes after it was last sent, not 1.75 years.
func TestElapsedBounded(t *testing.T) {
	d := daemontest.Start(t, policy)
	a := open(t, d)
	a.report("shop", usage(1<<40, year, "plan", "gold"), usage(1, year, "plan", "open"))
	got := a.recv(2)
	for b, w := range map[string]string{
		"plan=gold": "token_bucket max=1 fill=600/1m0s ttl=1m30s", // all of 600/min
		"plan=open": "ALLOW_ALL ttl=1m30s",
	} {
		if g := describe(got[b]); g != w {
			t.Errorf("%s, a year said elapsed: got %s, want %s", b, g, w)
		}
	}
	if err := a.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a's stream gone", func() bool { v := d.Quota().View(); return len(v) == 1 && !v[0].Clients[0].Live })
	b := open(t, d)
	d.Clock.Set(daemontest.T0.UnixNano() + int64(104*time.Second))
	b.report("shop", usage(1000, time.Second, "plan", "gold"))
	if g := describe(b.recv(1)["plan=gold"]); g != "DENY_ALL ttl=2s" {
		t.Fatalf("b 104s after a's last assignment, which it may still apply: %s", g)
	}
	d.Clock.Set(daemontest.T0.UnixNano() + int64(105*time.Second)) // 90s to live, 15s to arrive
	d.Quota().Tick()
	for _, c := range d.Quota().View()[0].Clients {
		if c.Live && c.Share != 600 {
			t.Fatalf("b 105s after a's last assignment: a share of %d, want all of 600/min", c.Share)
		}
	}
	if g := describe(b.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=600/1m0s ttl=2s" {
		t.Fatalf("b 105s after a's last assignment: %s, want all of 600/min", g)
	}
}

// TestAskedSaturates: allowed plus denied past 2^64 asks for everything,
// not for the little it wraps round to.
func TestAskedSaturates(t *testing.T) {
	d := daemontest.Start(t, policy)
	e := open(t, d)
	u := usage(math.MaxUint64, time.Second, "plan", "gold")
	u.NumRequestsDenied = 1
	e.report("shop", u)
	if g := describe(e.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=600/1m0s ttl=2s" {
		t.Fatalf("2^64 asked in a second: %s, want all of 600/min", g)
	}
}

// fill reports buckets name=api,user=<prefix>0… on streams of at most
// MaxStreamBuckets buckets each, open(ctx) opening them, and reads every
// answer; it returns how many answers were DENY_ALL.
func fill(t *testing.T, open func() *envoy, domain, prefix string, buckets int) (denied int) {
	t.Helper()
	for first := 0; first < buckets; first += 1024 {
		e := open()
		var usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
		for i := first; i < min(first+1024, buckets); i++ {
			usages = append(usages, usage(1, time.Second, "name", "api", "user", prefix+strconv.Itoa(i)))
		}
		e.report(domain, usages...)
		for _, a := range e.recv(len(usages)) {
			if strings.HasPrefix(describe(a), "DENY_ALL") {
				denied++
			}
		}
	}
	return denied
}

// TestTenantShareOfTheTable: without an authorization policy, a domain's
// streams may bring at most MaxTenantBuckets (4,096) buckets into the
// server's table of 65,536; beyond that, its buckets are answered
// DENY_ALL, its streams go on, and the refusal is logged and counted. A
// tenant that reports 65,536 buckets leaves another domain's quota
// streams served.
func TestTenantShareOfTheTable(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"shop.yaml": policy, "other.yaml": strings.Replace(policy, "domain: shop", "domain: other", 1)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := daemontest.Start(t, "", daemontest.Path(dir))
	denied := fill(t, func() *envoy { return open(t, d) }, "shop", "m", 1<<16)
	if want := 1<<16 - 4096; denied != want {
		t.Errorf("shop's 65,536 buckets: %d answered DENY_ALL, want %d (all past 4,096)", denied, want)
	}
	e := open(t, d)
	e.report("other", usage(1, time.Second, "name", "api", "user", "alice"))
	if g := describe(e.recv(1)["name=api,user=alice"]); !strings.HasPrefix(g, "token_bucket") {
		t.Fatalf("another domain's bucket while shop floods: %s, want a share", g)
	}
	if n := metric(t, d, `ratelimitd_quota_refused_total{domain="shop"}`); n != float64(1<<16-4096) {
		t.Errorf("refusals counted: %v", n)
	}
	if logs := d.Logs(); strings.Count(logs, "buckets beyond a bound are answered DENY_ALL") != 1 || !strings.Contains(logs, `the domain \"shop\" already has 4096 buckets`) {
		t.Errorf("the refusals are not logged once:\n%s", logs)
	}
}

// TestCallerShareOfTheTable: under an authorization policy, the table's
// shares are per caller (the policy's clients): mallory's 4,096 buckets
// of shop leave alice, in the same domain, room for hers.
func TestCallerShareOfTheTable(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"authz.yaml": `
clients:
  - name: mallory
    match: [{tokens: mallory.tokens}]
    grants: [{domains: [shop], access: charge}]
  - name: alice
    match: [{tokens: alice.tokens}]
    grants: [{domains: [shop], access: charge}]
`,
		"mallory.tokens": "mallory-0123456789abcdefghij\n",
		"alice.tokens":   "alice-0123456789abcdefghijkl\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := daemontest.Start(t, policy, func(c *daemon.Config) { c.AuthzPolicy = filepath.Join(dir, "authz.yaml") })
	as := func(token string) func() *envoy {
		return func() *envoy {
			ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
			t.Cleanup(cancel)
			s, err := rlqsv3.NewRateLimitQuotaServiceClient(d.Dial(t)).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return &envoy{t: t, stream: s}
		}
	}
	if denied := fill(t, as("mallory-0123456789abcdefghij"), "shop", "m", 4097); denied != 1 {
		t.Errorf("mallory's 4,097 buckets: %d answered DENY_ALL, want 1", denied)
	}
	if denied := fill(t, as("alice-0123456789abcdefghijkl"), "shop", "a", 10); denied != 0 {
		t.Errorf("alice's 10 buckets of the same domain: %d answered DENY_ALL, want none", denied)
	}
	if !strings.Contains(d.Logs(), `the caller \"mallory\" already has 4096 buckets`) {
		t.Errorf("the refusal does not name mallory:\n%s", d.Logs())
	}
}

// TestLedgerKeyBounded: with --store redis, a report that says a year
// elapsed leaves a ledger key that Redis expires within 1m47s
// (quota.MaxLease), not one that keeps the bucket's limit held for a year
// and three quarters across every daemon and restart.
func TestLedgerKeyBounded(t *testing.T) {
	srv := redistest.Start(t)
	d := daemontest.Start(t, policy, func(c *daemon.Config) { // leases on Redis TIME
		c.Store, c.Redis = "redis", redisstore.Config{Addr: srv.Addr(), KeyPrefix: "lk:", Timeout: 2 * time.Second}
	})
	e := open(t, d)
	e.report("shop", usage(1<<40, year, "plan", "gold"))
	wait.For(t, "the report", func() bool { return len(d.Quota().View()) == 1 })
	d.Quota().Tick() // publishes the report's demand
	d.Quota().Tick() // claims
	e.recv(1)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	keys, err := admin.Keys(context.Background(), "lk:quota:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("ledger keys: %v (%v)", keys, err)
	}
	if ttl, err := admin.PTTL(context.Background(), keys[0]).Result(); err != nil || ttl <= 0 || ttl > 107*time.Second {
		t.Fatalf("the ledger key expires in %v (%v), want within 1m47s", ttl, err)
	}
}

// unmatched returns n usages of BucketIds no rule of policy matches, each
// of its own.
func unmatched(n int) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	usages := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, n)
	for i := range usages {
		usages[i] = usage(1, time.Second, "nomatch", strconv.Itoa(i))
	}
	return usages
}

// TestUnmatchedHoldNoOne: reports of 30,000 BucketIds that match no rule
// (about 1 MB each), from a client that reads none of its answers, hold no
// other stream up: another stream is answered while the flood waits for
// its reader.
func TestUnmatchedHoldNoOne(t *testing.T) {
	d := daemontest.Start(t, policy)
	flood := open(t, d)
	flood.report("shop", unmatched(30_000)...) // and never reads
	flood.report("shop", unmatched(30_000)...)
	wait.For(t, "the flood's report", func() bool { return metric(t, d, `ratelimitd_quota_reports_total{domain="shop"}`) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the flood takes minutes where it holds the lock
	defer cancel()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(d.Dial(t)).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := &envoy{t: t, stream: s}
	other.report("shop", usage(1, time.Second, "plan", "gold"))
	if g := describe(other.recv(1)["plan=gold"]); !strings.HasPrefix(g, "token_bucket") {
		t.Fatalf("another stream's bucket during the flood: %s, want a share", g)
	}
}

// BenchmarkUnmatched: the daemon's cost of a report of n BucketIds that
// match no rule, answered and read, per BucketId: the same whatever n.
func BenchmarkUnmatched(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 30_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			d := daemontest.Start(b, policy)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := rlqsv3.NewRateLimitQuotaServiceClient(d.Dial(b)).StreamRateLimitQuotas(ctx)
			if err != nil {
				b.Fatal(err)
			}
			usages := unmatched(n)
			b.ResetTimer()
			for range b.N {
				if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "shop", BucketQuotaUsages: usages}); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < n; {
					resp, err := s.Recv()
					if err != nil {
						b.Fatal(err)
					}
					got += len(resp.GetBucketAction())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/id")
		})
	}
}
