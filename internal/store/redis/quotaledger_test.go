package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

func sync1(t *testing.T, l *redis.QuotaLedger, c quota.Claim) quota.Grant {
	t.Helper()
	g, err := l.Sync(context.Background(), []quota.Claim{c})
	if err != nil {
		t.Fatal(err)
	}
	return g[0]
}

// TestQuotaLedger: three daemons share a limit of 100 through the ledger,
// on a test clock: each is granted what it wants of what the others'
// entries in force leave, never less than what its clients may already
// apply; an entry stops counting when its lease ends; a removed entry
// frees its grant at once, and the key goes with the last entry.
func TestQuotaLedger(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).UnixNano())
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "ql:"}, clk)
	a, b, c := s.redis.QuotaLedger(), s.redis.QuotaLedger(), s.redis.QuotaLedger()
	claim := func(keep, want int64, lease time.Duration, demands ...int64) quota.Claim {
		return quota.Claim{Bucket: "shop\x00route\x00checkout", Limit: 100, Keep: keep, Want: want, Lease: lease, Demands: demands}
	}
	steps := []struct {
		what   string
		ledger *redis.QuotaLedger
		claim  quota.Claim
		wait   time.Duration // before the claim
		grant  int64
		others []int64
	}{
		{"a alone wants 60", a, claim(0, 60, 5*time.Second, 60), 0, 60, nil},
		{"b wants 60: 40 left", b, claim(0, 60, 5*time.Second, 70), 0, 40, []int64{60}},
		{"c wants 10: nothing left", c, claim(0, 10, 5*time.Second, 10), 0, 0, []int64{60, 70}},
		{"a shrinks to 30 but its clients may still apply 60", a, claim(60, 60, 5*time.Second, 30), 0, 60, []int64{10, 70}},
		{"a's larger share expired", a, claim(30, 30, 5*time.Second, 30), time.Second, 30, []int64{10, 70}},
		{"b grows out of what a freed", b, claim(40, 70, 5*time.Second, 70), 0, 70, []int64{10, 30}},
		{"c still finds nothing", c, claim(0, 10, 5*time.Second, 10), 0, 0, []int64{30, 70}},
		{"a's and b's leases end (5s after their last claims)", c, claim(0, 10, 5*time.Second, 10), 5*time.Second + time.Millisecond, 10, nil},
		{"a keep above what is left (a reload lowered the limit) is kept", a, quota.Claim{Bucket: "shop\x00route\x00checkout", Limit: 5, Keep: 8, Want: 8, Lease: time.Second}, 0, 8, []int64{10}},
		{"a removes its entry", a, claim(0, 0, 0), 0, 0, []int64{10}},
		{"c can take all", c, claim(0, 100, 5*time.Second, 100), 0, 100, nil},
	}
	for _, st := range steps {
		clk.Advance(st.wait)
		g := sync1(t, st.ledger, st.claim)
		slices.Sort(g.Others)
		if g.Grant != st.grant || !slices.Equal(g.Others, st.others) {
			t.Fatalf("%s: granted %d with the others' demands %v, want %d and %v", st.what, g.Grant, g.Others, st.grant, st.others)
		}
	}
	sync1(t, c, claim(0, 0, 0))
	if n, _ := srv.Command("EXISTS", "ql:quota:shop\x00route\x00checkout"); n != ":0" {
		t.Errorf("the ledger key outlives its last entry (EXISTS: %s)", n)
	}
}

// TestQuotaLedgerExpires: on Redis's clock, the bucket's key expires with
// the last lease of its entries, so a ledger left by daemons that stopped
// leaves nothing behind.
func TestQuotaLedgerExpires(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "qx:"}, nil)
	a, b := s.redis.QuotaLedger(), s.redis.QuotaLedger()
	if g := sync1(t, a, quota.Claim{Bucket: "k", Limit: 10, Want: 4, Lease: 3 * time.Second, Demands: []int64{4}}); g.Grant != 4 {
		t.Fatalf("a granted %d, want 4", g.Grant)
	}
	if g := sync1(t, b, quota.Claim{Bucket: "k", Limit: 10, Want: 10, Lease: time.Second, Demands: []int64{9}}); g.Grant != 6 || !slices.Equal(g.Others, []int64{4}) {
		t.Fatalf("b granted %+v, want 6 and a's demand 4", g)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	ttl, err := admin.PTTL(context.Background(), "qx:quota:k").Result()
	if err != nil || ttl <= 2*time.Second || ttl > 3*time.Second+time.Millisecond {
		t.Fatalf("the key expires in %v (%v), want a's lease, 3s", ttl, err)
	}
}

// TestQuotaLedgerLeaseBounded: no entry holds longer than quota.MaxLease
// (1m47s) beyond the claim that reads it, whatever lease its daemon asked
// for or an older daemon wrote: the key expires within it on Redis's
// clock, and on a test clock a year-long entry stops counting after it.
func TestQuotaLedgerLeaseBounded(t *testing.T) {
	const maxLease = 107 * time.Second // 1.75 × a minute's interval, and 2s of slack
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	old := func(key string, untilMs int64) { // an entry of 600 until untilMs, as a daemon told a year-long interval wrote it
		if err := admin.Set(ctx, key, fmt.Sprintf("old 600 %d 1000;", untilMs), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "qb:"}, nil)
	old("qb:quota:k", time.Now().Add(365*24*time.Hour).UnixMilli())
	if g := sync1(t, s.redis.QuotaLedger(), quota.Claim{Bucket: "k", Limit: 600, Want: 600, Lease: 365 * 24 * time.Hour, Demands: []int64{600}}); g.Grant != 0 {
		t.Fatalf("granted %d while the old entry's 600 holds, want 0", g.Grant)
	}
	if ttl, err := admin.PTTL(ctx, "qb:quota:k").Result(); err != nil || ttl <= 0 || ttl > maxLease+time.Millisecond {
		t.Fatalf("the key expires in %v (%v), want within %v", ttl, err, maxLease)
	}

	clk := clock.NewFake(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).UnixNano())
	c := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "qc:"}, clk)
	old("qc:quota:k", clk.Now()/1e6+(365*24*time.Hour).Milliseconds())
	l := c.redis.QuotaLedger()
	claim := quota.Claim{Bucket: "k", Limit: 600, Want: 600, Lease: time.Second, Demands: []int64{600}}
	if g := sync1(t, l, claim); g.Grant != 0 {
		t.Fatalf("granted %d while the old entry's 600 holds, want 0", g.Grant)
	}
	clk.Advance(maxLease + time.Millisecond)
	if g := sync1(t, l, claim); g.Grant != 600 {
		t.Fatalf("%v after the year-long entry was read: granted %d, want all 600", maxLease, g.Grant)
	}
}

// TestQuotaLedgerNeverOverLimit: daemons claiming at random (each never
// keeping more than its grant in force, as the allocator does), with
// leases ending at random, are granted exactly what an independent model
// of the ledger grants, and the grants in force never add up to more than
// the limit. Buckets on a cluster's three nodes, claims pipelined.
func TestQuotaLedgerNeverOverLimit(t *testing.T) {
	cl := redistest.StartCluster(t)
	clk := clock.NewFake(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).UnixNano())
	s := newTestStore(t, redis.Config{ClusterAddrs: cl.Addrs(), KeyPrefix: "qn:"}, clk)
	const daemons, limit = 4, 1000
	buckets := []string{"a", "b", "c", "d", "e", "f"}
	type entry struct {
		grant, until int64 // ms
		demands      []int64
	}
	ledgers := make([]*redis.QuotaLedger, daemons)
	model := map[string][]entry{} // by bucket, by daemon
	for i := range ledgers {
		ledgers[i] = s.redis.QuotaLedger()
	}
	for _, b := range buckets {
		model[b] = make([]entry, daemons)
	}
	r := rand.New(rand.NewPCG(7, 11))
	for round := range 400 {
		clk.Advance(time.Duration(r.IntN(300)) * time.Millisecond)
		now := clk.Now() / 1e6
		d := r.IntN(daemons)
		var claims []quota.Claim
		var want []int64
		for _, b := range buckets {
			if r.IntN(2) == 0 {
				continue
			}
			mine := model[b][d]
			var keep int64
			if mine.until > now {
				keep = r.Int64N(mine.grant + 1)
			}
			c := quota.Claim{Bucket: b, Limit: limit, Keep: keep, Want: keep + r.Int64N(500),
				Lease: time.Duration(r.IntN(2000)) * time.Millisecond, Demands: []int64{r.Int64N(900) + 1}}
			if r.IntN(10) == 0 {
				c = quota.Claim{Bucket: b, Limit: limit} // removed
			}
			var others int64
			for o, e := range model[b] {
				if o != d && e.until > now {
					others += e.grant
				}
			}
			g := max(min(c.Want, limit-others), c.Keep, 0)
			want = append(want, g)
			lease := c.Lease.Milliseconds()
			if c.Lease > 0 {
				lease++
			}
			model[b][d] = entry{grant: g, until: now + lease, demands: c.Demands}
			if c.Lease == 0 {
				model[b][d] = entry{}
			}
			claims = append(claims, c)
		}
		grants, err := ledgers[d].Sync(context.Background(), claims)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range claims {
			var others []int64
			for o, e := range model[c.Bucket] {
				if o != d && e.until > now {
					others = append(others, e.demands...)
				}
			}
			slices.Sort(others)
			got := slices.Sorted(slices.Values(grants[i].Others))
			if grants[i].Grant != want[i] || !slices.Equal(got, others) {
				t.Fatalf("round %d, daemon %d, bucket %s, %+v: granted %d with others %v, the model %d with %v",
					round, d, c.Bucket, c, grants[i].Grant, got, want[i], others)
			}
			var sum int64
			for _, e := range model[c.Bucket] {
				if e.until > now {
					sum += e.grant
				}
			}
			if sum > limit {
				t.Fatalf("round %d, bucket %s: grants in force add up to %d > %d", round, c.Bucket, sum, limit)
			}
		}
	}
}

// BenchmarkQuotaLedgerSync: one daemon's tick of claims for 1 and 100
// buckets (one pipelined round trip), against another daemon's entries;
// ns/op is per tick, claim-µs per bucket's claim.
func BenchmarkQuotaLedgerSync(b *testing.B) {
	srv := redistest.Start(b)
	s := newTestStore(b, redis.Config{Addr: srv.Addr(), KeyPrefix: "qb:"}, nil)
	other, mine := s.redis.QuotaLedger(), s.redis.QuotaLedger()
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			claims := make([]quota.Claim, n)
			for i := range claims {
				claims[i] = quota.Claim{Bucket: fmt.Sprintf("shop\x00route\x00r%d", i), Limit: 50000, Keep: 1000, Want: 2000,
					Lease: 4 * time.Second, Demands: []int64{2000, 1500, 900}}
			}
			if _, err := other.Sync(context.Background(), claims); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := mine.Sync(context.Background(), claims); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "claim-µs")
		})
	}
}
