package redis_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// TestConcurrencyMatchesGo holds fast.lua's concurrency to
// internal/core/algorithms': thousands of random admits, checks, overdraft
// charges and releases on one bucket (matchConcurrency), for every lease
// up to MaxLease, generations that are and are not whole milliseconds
// (over 9·10^9 ns among them), and 1, 5 and MaxInFlight in flight.
func TestConcurrencyMatchesGo(t *testing.T) {
	srv := redistest.Start(t)
	leases := []time.Duration{
		1, // G = 1ns
		7, // G = 2ns, the lease not a multiple of it
		60 * time.Millisecond,
		time.Second + 1,
		6*9_000_000_007 - 3, // G = 9,000,000,007ns: not whole ms, over 9·10^9
		algorithms.MaxLease,
	}
	for _, lease := range leases {
		for _, inFlight := range []int64{1, 5, algorithms.MaxInFlight} {
			t.Run(fmt.Sprintf("%d in flight, lease %v", inFlight, lease), func(t *testing.T) {
				matchConcurrency(t, srv.Addr(), inFlight, lease, uint64(lease)^uint64(inFlight), 3000)
			})
		}
	}
}

// FuzzConcurrencyScript is TestConcurrencyMatchesGo on any limit and
// timeline. Run longer with
//
//	go test -run '^$' -fuzz '^FuzzConcurrencyScript$' -fuzztime 60s ./internal/store/redis/
func FuzzConcurrencyScript(f *testing.F) {
	srv := redistest.Start(f)
	f.Add(uint16(3), int64(time.Minute), uint64(1))
	f.Add(uint16(1), int64(13), uint64(2))
	f.Add(uint16(65535), int64(algorithms.MaxLease), uint64(3))
	f.Fuzz(func(t *testing.T, inFlight uint16, lease int64, seed uint64) {
		if lease < 0 {
			lease = -(lease + 1)
		}
		lease = 1 + lease%int64(algorithms.MaxLease)
		matchConcurrency(t, srv.Addr(), max(int64(inFlight), 1), time.Duration(lease), seed, 300)
	})
}

// matchConcurrency decides ops random admits, checks, overdraft charges
// and releases of a concurrency of inFlight with lease on a store on the
// Redis at addr, at times a fraction of a generation apart (so that
// generations fill, shift and expire under every operation) and now and
// then back, each exactly as Limit.Apply decides it, and all on plain Lua
// numbers.
func matchConcurrency(t *testing.T, addr string, inFlight int64, lease time.Duration, seed uint64, ops int) {
	l := storetest.MustLimit(t, algorithms.Concurrency, inFlight, lease, 0)
	g := (int64(lease) + 5) / 6
	start := storetest.T0 + 12_345_678_901
	c := clock.NewFake(start)
	s := newTestStore(t, redis.Config{Addr: addr}, c)
	rng := rand.New(rand.NewPCG(seed, 0xc0c))
	var want algorithms.State
	now := start
	for i := range ops {
		switch r := rng.IntN(20); {
		case r == 0 && now-start > 3*g:
			now -= rng.Int64N(3 * g) // a clock that went back
		case r < 3:
			now += rng.Int64N(8 * g) // past expiries
		case r < 15:
			now += rng.Int64N(g/3 + 1)
		}
		c.Set(now)
		ch := store.Charge{Domain: storetest.Domain, Key: []byte("pool"), Limit: l}
		switch r := rng.IntN(10); {
		case r < 4:
			ch.Kind = algorithms.Admit
		case r < 5:
			ch.Kind = algorithms.Check
		case r < 6:
			ch.Kind = algorithms.Overdraft
		default:
			ch.Kind = algorithms.Refund
		}
		switch r := rng.IntN(8); {
		case r == 0:
			ch.Cost = 0
		case r == 1:
			ch.Cost = inFlight + 1 + rng.Int64N(3)
		case r == 2:
			ch.Cost = 1 + rng.Int64N(inFlight)
		default:
			ch.Cost = 1 + rng.Int64N(min(inFlight, 3))
		}
		next, wantD := ch.Decide(want, now)
		wantD.At = 0 // storetest.Apply reports the algorithms' decision
		if ch.Applied(wantD, wantD.Code == algorithms.Allowed) {
			want = next
		}
		got := storetest.Apply(t, s, ch)[0]
		if got != wantD {
			t.Fatalf("op %d at %d: %v of %d\n got %+v\nwant %+v", i, now-start, ch.Kind, ch.Cost, got, wantD)
		}
	}
	if fast, big := redis.Paths(s.redis); fast == 0 || big != 0 {
		t.Errorf("%d charges on the fast path, %d on bignums; want the fast path only", fast, big)
	}
}
