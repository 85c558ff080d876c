package redis_test

import (
	"context"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// countingStore gives every charge a store.Charge.Counter, as the engine
// does with engine.WithCounterKeys, before its store settles them: the
// bucket's key in hexadecimal, so that distinct buckets have distinct
// counters, as distinct descriptors do.
type countingStore struct{ store.Store }

func (s countingStore) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	c := append([]store.Charge(nil), charges...)
	for i := range c {
		c[i].Counter = []byte(c[i].Domain + "_key_" + hex.EncodeToString(c[i].Key) + "_")
	}
	return s.Store.Apply(ctx, c, decisions)
}

// TestConformanceCounters runs the conformance suite with Config.Counters
// on, every charge asking for a counter: the fixed windows of whole
// seconds are then kept as envoyproxy/ratelimit's counters, and every
// decision is still the memory store's, on a clock that never goes back
// (storetest.Options.ForwardOnly: a key per window decides a clock gone
// back into an earlier window in that window).
func TestConformanceCounters(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, c *clock.Fake) store.Store {
		return countingStore{newTestStore(t, redis.Config{Addr: srv.Addr(), Counters: true}, c)}
	}, storetest.Options{ForwardOnly: true})

	// The fixed windows were counters: keys without a hash tag, ending in
	// their window's start.
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if keys := rdb.Keys(context.Background(), "test*:conformance_key_*_[0-9]*").Val(); len(keys) == 0 {
		t.Error("no counter among the suite's keys")
	}
}

// upstreamKey is the key envoyproxy/ratelimit counts a fixed window of
// period in: prefix, domain, each entry's key and value, each followed by
// "_", and the window's start in Unix seconds at now.
func upstreamKey(prefix, domain string, now int64, period time.Duration, entries ...string) string {
	k := prefix + domain + "_"
	for _, e := range entries {
		k += e + "_"
	}
	sec := now / int64(time.Second)
	p := int64(period / time.Second)
	return k + strconv.FormatInt(sec/p*p, 10)
}

// TestCountersContinueUpstream: a count envoyproxy/ratelimit wrote (INCRBY
// on its key, with its EXPIRE) is continued by the store, and one the store
// wrote is continued by upstream's INCRBY; the key expires when the window
// ends, as upstream's does at the latest.
func TestCountersContinueUpstream(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	now := storetest.T0 + int64(20*time.Second) // 40s before the minute ends
	c := clock.NewFake(now)
	s, err := redis.New(redis.Config{Addr: srv.Addr(), Counters: true, Clock: c, KeyPrefix: "rl_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	perMinute := mustLimit(t, algorithms.FixedWindow, 5, time.Minute, 0)
	alice := store.Charge{Domain: "api", Key: engineKey("api", "user", "alice", "fixed/1m"), Limit: perMinute, Cost: 1,
		Counter: []byte("api_user_alice_")}
	key := upstreamKey("rl_", "api", now, time.Minute, "user", "alice")

	// Upstream counted 3 hits in this minute.
	rdb.IncrBy(ctx, key, 3)
	rdb.Expire(ctx, key, time.Minute)
	d := apply(t, s, alice)[0]
	if d.Code != algorithms.Allowed || d.Remaining != 1 {
		t.Fatalf("after upstream's 3 of 5: %+v, want allowed with 1 remaining", d)
	}
	if got := get(t, rdb, key); got != "4" {
		t.Fatalf("%s = %q after the store's charge, want \"4\"", key, got)
	}
	// Upstream counts one more: the window is full for the store too.
	rdb.IncrBy(ctx, key, 1)
	if d := apply(t, s, alice)[0]; d.Code != algorithms.Denied || d.Remaining != 0 || d.RetryAfter != 40*time.Second {
		t.Fatalf("after 5 of 5: %+v, want denied, 0 remaining, retry after 40s", d)
	}
	if got := get(t, rdb, key); got != "5" {
		t.Fatalf("%s = %q after a denial, want \"5\" (a denied request is not counted)", key, got)
	}

	// The store counts first in a new window; upstream continues.
	c.Advance(time.Minute)
	key2 := upstreamKey("rl_", "api", c.Now(), time.Minute, "user", "alice")
	apply(t, s, alice, store.Charge{Domain: "api", Key: engineKey("api", "user", "bob", "fixed/1m"), Limit: perMinute, Cost: 2,
		Counter: []byte("api_user_bob_")})
	if got := get(t, rdb, key2); got != "1" {
		t.Fatalf("%s = %q, want \"1\"", key2, got)
	}
	if n := rdb.IncrBy(ctx, key2, 1).Val(); n != 2 {
		t.Fatalf("upstream's INCRBY on the store's count gave %d, want 2", n)
	}
	if got := get(t, rdb, upstreamKey("rl_", "api", c.Now(), time.Minute, "user", "bob")); got != "2" {
		t.Fatalf("bob's count = %q, want \"2\"", got)
	}
	// Written 40s before the window's end (Redis's clock is not the fake
	// one, so PX is relative): the key expires then.
	if ttl := rdb.PTTL(ctx, key2).Val(); ttl <= 39*time.Second || ttl > 40*time.Second {
		t.Errorf("PTTL %s = %v, want 40s at most, the rest of the window", key2, ttl)
	}
	if d := apply(t, s, alice)[0]; d.Code != algorithms.Allowed || d.Remaining != 2 {
		t.Fatalf("after 2 (one upstream's) of 5, another: %+v, want allowed with 2 remaining", d)
	}
}

// TestCountersKeepOwnKeys: only fixed windows of whole seconds that
// fast.lua decides are counters; another algorithm, a fixed window of a
// sub-second or week-long period, and a charge without Counter keep
// ratelimitd's own keys.
func TestCountersKeepOwnKeys(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c := clock.NewFake(storetest.T0)
	s, err := redis.New(redis.Config{Addr: srv.Addr(), Counters: true, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counter := []byte("d_k_v_")
	for _, ch := range []store.Charge{
		{Limit: mustLimit(t, algorithms.TokenBucket, 5, time.Minute, 5), Counter: counter},
		{Limit: mustLimit(t, algorithms.SlidingWindow, 5, time.Minute, 0), Counter: counter},
		{Limit: mustLimit(t, algorithms.FixedWindow, 5, 1500*time.Millisecond, 0), Counter: counter},
		{Limit: mustLimit(t, algorithms.FixedWindow, 5, 7*24*time.Hour, 0), Counter: counter},
		{Limit: mustLimit(t, algorithms.FixedWindow, 5, time.Minute, 0)},
	} {
		rdb.FlushAll(ctx)
		ch.Domain, ch.Key, ch.Cost = "d", engineKey("d", "k", "v", "x"), 1
		apply(t, s, ch)
		keys := rdb.Keys(ctx, "*").Val()
		if len(keys) != 1 || keys[0] != "{d}"+string(ch.Key) {
			t.Errorf("%v (counter %q): keys %q, want ratelimitd's own", ch.Limit, ch.Counter, keys)
		}
	}
}
