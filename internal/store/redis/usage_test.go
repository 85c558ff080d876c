package redis_test

import (
	"math"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestDebtExpiry: on Redis TIME, a bucket that an overdraft charge left in
// debt keeps its key until it is back at rest, debt included: the key
// expires at restAt rounded up to the millisecond, and restAt is
// ResetAfter after the script ran — on fast.lua's path and on bignums (a
// period of 2^50 ns, beyond the fast path). A refund that brings the bucket
// back to rest deletes the key.
func TestDebtExpiry(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "debt:"}, nil)

	odd := time.Hour + time.Nanosecond // windows end k·P: between milliseconds
	tests := []struct {
		name   string
		limit  *algorithms.Limit
		cost   int64         // an overdraft of cost leaves the bucket in debt
		beyond time.Duration // and at rest no sooner than this after it ran
	}{
		{"fixed_window", mustLimit(t, algorithms.FixedWindow, 3, odd, 0), 5, 0},
		{"sliding_window", mustLimit(t, algorithms.SlidingWindow, 3, odd, 0), 5, odd},
		// 3 a second, capacity 3: 1000 in debt is 1000/3 s more.
		{"token_bucket", mustLimit(t, algorithms.TokenBucket, 3, time.Second, 0), 1003, 333 * time.Second},
		{"leaky_bucket", mustLimit(t, algorithms.LeakyBucket, 3, time.Second, 0), 1003, 333 * time.Second},
		{"leaky_bucket_queue", mustLimit(t, algorithms.LeakyBucketQueue, 3, time.Second, 4), 1004, 333 * time.Second},
		{"token_bucket on bignums", mustLimit(t, algorithms.TokenBucket, 7, 1<<50, 0), math.MaxInt64, algorithms.MaxSpan - time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := engineKey("shop", tt.name)
			redisKey := "debt:{shop}" + string(key)
			charge := func(kind algorithms.Kind, cost int64) store.Charge {
				return store.Charge{Domain: "shop", Key: key, Limit: tt.limit, Cost: cost, Kind: kind}
			}
			before := redisNow(t, admin)
			d := apply(t, s, charge(algorithms.Overdraft, tt.cost))[0]
			after := redisNow(t, admin)
			if d.Code != algorithms.Denied || d.Remaining != 0 || d.ResetAfter < tt.beyond {
				t.Fatalf("an overdraft of %d: %+v, want denied, in debt for at least %v", tt.cost, d, tt.beyond)
			}
			restAt, expireMs := storedRest(t, admin, redisKey)
			if ran := restAt - int64(d.ResetAfter); ran < before || ran > after {
				t.Errorf("the stored state is at rest at %d, but the decision says %v after the script ran, which was between %d and %d",
					restAt, d.ResetAfter, before, after)
			}
			if !expiresAtRest(expireMs, restAt) {
				t.Errorf("the key expires at %d ms; its bucket in debt is at rest at %d ns: want that rounded up to the millisecond", expireMs, restAt)
			}
			if d := apply(t, s, charge(algorithms.Check, 0))[0]; d.Code != algorithms.Denied {
				t.Errorf("a check in debt: %+v, want denied", d)
			}
			if d := apply(t, s, charge(algorithms.Refund, math.MaxInt64))[0]; d.Code != algorithms.Allowed || d.Remaining != tt.limit.Capacity() || d.ResetAfter != 0 {
				t.Errorf("a refund of everything: %+v, want allowed, the bucket at rest", d)
			}
			if n, err := admin.Exists(t.Context(), redisKey).Result(); err != nil || n != 0 {
				t.Errorf("a bucket refunded back to rest keeps its key (EXISTS %d, %v)", n, err)
			}
		})
	}
}

// TestDenyCacheKinds: the deny cache never answers for an overdraft charge
// or a refund, nor remembers an overdraft's denial (the charge was taken,
// and the next must be too); a check is a cost of 1, answered by a denial
// of a check or of an admit of cost 1; and a refund through the store
// forgets the bucket's denial, so that what it gave back can be used.
func TestDenyCacheKinds(t *testing.T) {
	srv := redistest.Start(t)
	c := clock.NewFake(t0)
	s := newGuardedStore(t, redis.Config{Addr: srv.Addr()}, guard.Config{DenyCache: 100}, c)
	budget := mustLimit(t, algorithms.FixedWindow, 1000, time.Minute, 0)
	key := engineKey("shop", "model", "gpt")
	charge := func(kind algorithms.Kind, cost int64) store.Charge {
		return store.Charge{Domain: "shop", Key: key, Limit: budget, Cost: cost, Kind: kind}
	}
	fromRedis := func(what string, cs ...store.Charge) algorithms.Decision {
		t.Helper()
		before := s.RoundTrips()
		d := apply(t, s, cs...)
		if s.RoundTrips() == before {
			t.Fatalf("%s was answered from the deny cache", what)
		}
		return d[len(d)-1]
	}
	fromCache := func(what string, cs ...store.Charge) algorithms.Decision {
		t.Helper()
		before := s.RoundTrips()
		d := apply(t, s, cs...)
		if s.RoundTrips() != before {
			t.Fatalf("%s reached Redis; want it answered from the deny cache", what)
		}
		return d[len(d)-1]
	}

	// Two overdraft charges into debt: both reach Redis and both are taken.
	if d := fromRedis("an overdraft", charge(algorithms.Overdraft, 1200)); d.Code != algorithms.Denied {
		t.Fatalf("an overdraft of 1200 on 1000: %+v, want denied", d)
	}
	fromRedis("an overdraft after an overdraft's denial", charge(algorithms.Overdraft, 100))
	// 1300 used of 1000: 300 in debt.
	if d := fromRedis("a check", charge(algorithms.Check, 0)); d.Code != algorithms.Denied || d.RetryAfter != time.Minute {
		t.Fatalf("a check in debt: %+v, want denied for the rest of the window", d)
	}
	c.Set(t0 + int64(time.Second))
	if d := fromCache("a check after a check's denial", charge(algorithms.Check, 7)); d.Code != algorithms.Denied || d.RetryAfter != 59*time.Second {
		t.Errorf("a check from the cache: %+v, want denied, retry after 59s", d)
	}
	if d := fromCache("an admit of 1 after a check's denial", charge(algorithms.Admit, 1)); d.Code != algorithms.Denied {
		t.Errorf("an admit of 1 from the cache: %+v, want denied", d)
	}
	fromRedis("an admit of 2 after a check's denial", charge(algorithms.Admit, 2))
	// A request with a refund reaches Redis, even beside a remembered denial.
	other := store.Charge{Domain: "shop", Key: engineKey("shop", "user", "ann"), Limit: budget, Cost: 5, Kind: algorithms.Refund}
	fromRedis("a request with a refund", charge(algorithms.Check, 0), other)
	fromRedis("a request with an overdraft", charge(algorithms.Check, 0), store.Charge{Domain: "shop", Key: other.Key, Limit: budget, Cost: 5, Kind: algorithms.Overdraft})
	// The refund of 360 on the bucket itself forgets its denial: 60 left.
	if d := fromRedis("a refund", charge(algorithms.Refund, 360)); d.Code != algorithms.Allowed || d.Remaining != 60 {
		t.Fatalf("a refund of 360 after 1300 charged: %+v, want allowed, 60 remaining", d)
	}
	if d := fromRedis("a check after a refund", charge(algorithms.Check, 0)); d.Code != algorithms.Allowed || d.Remaining != 60 {
		t.Errorf("a check after the refund: %+v, want allowed, 60 remaining", d)
	}
}

// TestFailClosedKinds: with Redis down and FailClosed, a check is denied
// as a charge is, an overdraft charge too, and a refund is allowed;
// nothing is recorded.
func TestFailClosedKinds(t *testing.T) {
	srv := redistest.Start(t)
	s := newGuardedStore(t, redis.Config{Addr: srv.Addr(), Timeout: 200 * time.Millisecond}, guard.Config{FailureMode: guard.FailClosed}, clock.NewFake(t0))
	l := mustLimit(t, algorithms.TokenBucket, 10, time.Minute, 0)
	srv.Stop()
	denied := algorithms.Decision{Code: algorithms.Denied, RetryAfter: guard.FailClosedRetryAfter}
	for _, tt := range []struct {
		kind algorithms.Kind
		cost int64
		want algorithms.Decision
	}{
		{algorithms.Check, 0, denied},
		{algorithms.Overdraft, 50, denied},
		{algorithms.Refund, 5, algorithms.Decision{}},
		{algorithms.Admit, 11, algorithms.Decision{Code: algorithms.OverCapacity}},
	} {
		if d := apply(t, s, store.Charge{Domain: "shop", Key: engineKey("shop", "k"), Limit: l, Cost: tt.cost, Kind: tt.kind})[0]; d != tt.want {
			t.Errorf("%v of %d with Redis down: %+v, want %+v", tt.kind, tt.cost, d, tt.want)
		}
	}
}
