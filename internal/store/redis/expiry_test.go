package redis_test

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestExpiry: on Redis TIME, every algorithm's charge stores its bucket's
// state with restAt the instant its decision says the bucket is back at
// rest (ResetAfter after the instant the script ran; a concurrency's when
// its last unit expires), and sets the key to
// expire at that instant rounded up to the millisecond: never before the
// bucket is at rest (the absent key would then admit what the bucket does
// not), and within the millisecond after it (a bucket at rest does
// expire). A peek and a denied charge leave the key as it was.
//
// The limits' instants fall between milliseconds, so that a rounding down
// shows.
func TestExpiry(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "exp:"}, nil)

	odd := time.Hour + time.Nanosecond // windows end k·P: between milliseconds
	tests := []struct {
		limit *algorithms.Limit
		costs []int64 // admitted one after the other; then one more is denied
	}{
		{mustLimit(t, algorithms.FixedWindow, 3, odd, 0), []int64{1, 2}},
		{mustLimit(t, algorithms.SlidingWindow, 3, odd, 0), []int64{1, 2}},
		{mustLimit(t, algorithms.TokenBucket, 3, time.Second, 0), []int64{1, 2}}, // I = 333,333,333⅓ ns
		{mustLimit(t, algorithms.LeakyBucket, 3, time.Second, 0), []int64{2, 1}},
		{mustLimit(t, algorithms.LeakyBucketQueue, 3, time.Second, 4), []int64{1, 3}},
		// Generations of 166,666,667 ns: the units' expiry between milliseconds.
		{mustLimit(t, algorithms.Concurrency, 3, time.Second+1, 0), []int64{1, 2}},
	}
	for _, tt := range tests {
		alg := tt.limit.Algorithm().String()
		t.Run(alg, func(t *testing.T) {
			key := engineKey("shop", alg)
			redisKey := "exp:{shop}" + string(key)
			charge := func(cost int64) store.Charge {
				return store.Charge{Domain: "shop", Key: key, Limit: tt.limit, Cost: cost}
			}
			for i, cost := range tt.costs {
				before := redisNow(t, admin)
				d := apply(t, s, charge(cost))[0]
				after := redisNow(t, admin)
				if d.Code != algorithms.Allowed || d.ResetAfter <= 0 {
					t.Fatalf("charge %d: %+v, want admitted", i, d)
				}
				restAt, expireMs := storedRest(t, admin, redisKey)
				if ran := restAt - int64(d.ResetAfter); ran < before || ran > after {
					t.Errorf("charge %d: the stored state is at rest at %d, but the decision says %v after the script ran, which was between %d and %d",
						i, restAt, d.ResetAfter, before, after)
				}
				if !expiresAtRest(expireMs, restAt) {
					t.Errorf("charge %d: the key expires at %d ms; its bucket is at rest at %d ns: want that rounded up to the millisecond", i, expireMs, restAt)
				}
			}

			value := get(t, admin, redisKey)
			_, expireMs := storedRest(t, admin, redisKey)
			if d := apply(t, s, charge(0))[0]; d.Code != algorithms.Allowed {
				t.Fatalf("peek: %+v", d)
			}
			if d := apply(t, s, charge(tt.limit.Capacity()))[0]; d.Code != algorithms.Denied {
				t.Fatalf("a charge of the capacity after %v: %+v, want denied", tt.costs, d)
			}
			if got := get(t, admin, redisKey); got != value {
				t.Errorf("a peek or a denied charge changed the key: %q, was %q", got, value)
			}
			if _, e := storedRest(t, admin, redisKey); e != expireMs {
				t.Errorf("a peek or a denied charge moved the expiry from %d ms to %d ms", expireMs, e)
			}
		})
	}
}

// expiresAtRest reports whether a key expiring at expireMs (Unix ms)
// expires when its bucket is at rest, at restAt (ns) rounded up to the
// millisecond: never sooner, and within the millisecond after.
func expiresAtRest(expireMs, restAt int64) bool {
	return expireMs*1e6 >= restAt && expireMs*1e6 < restAt+1e6
}

// redisNow returns Redis TIME in nanoseconds, as the scripts read it.
func redisNow(t *testing.T, c goredis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro() * 1000
}

func get(t *testing.T, c goredis.UniversalClient, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("GET %q: %v", key, err)
	}
	return v
}

// storedRest returns the restAt of the bucket state stored under key
// (storedState) and the key's expiry in Unix milliseconds (PEXPIRETIME; -1:
// none).
func storedRest(t *testing.T, c goredis.UniversalClient, key string) (restAt, expireMs int64) {
	t.Helper()
	_, _, _, restAt = storedState(t, c, key)
	expireMs, err := c.Do(context.Background(), "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatalf("PEXPIRETIME %q: %v", key, err)
	}
	return restAt, expireMs
}

// TestExpiryFollowsTheBucket: a charge that moves its bucket's rest
// (here a sliding window's charge in the window after its last one) moves
// the key's expiry with it, and a charge that does not (the window's
// second charge, whose state is overwritten in place) keeps it: after
// every charge the key expires at restAt rounded up to the millisecond.
func TestExpiryFollowsTheBucket(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "exp:"}, nil)

	period := 200*time.Millisecond + time.Nanosecond
	limit := mustLimit(t, algorithms.SlidingWindow, 100, period, 0)
	key := engineKey("shop", "follow")
	redisKey := "exp:{shop}" + string(key)
	charge := store.Charge{Domain: "shop", Key: key, Limit: limit, Cost: 1}

	check := func(what string) int64 {
		t.Helper()
		restAt, expireMs := storedRest(t, admin, redisKey)
		if !expiresAtRest(expireMs, restAt) {
			t.Fatalf("%s: the key expires at %d ms; its bucket is at rest at %d ns: want that rounded up to the millisecond", what, expireMs, restAt)
		}
		return expireMs
	}
	window := func() int64 { return redisNow(t, admin) / int64(period) }

	// Two charges early in one window (tried again from the next window's
	// start should a slow machine let the window end between them).
	var w, first int64
	for attempt := 0; ; attempt++ {
		for w0 := window(); window() == w0; {
			time.Sleep(time.Millisecond)
		}
		w = window()
		apply(t, s, charge)
		first = check("first charge")
		apply(t, s, charge)
		e := check("second charge")
		if window() != w {
			if attempt == 4 {
				t.Fatal("five times the window ended between two charges")
			}
			continue
		}
		if e != first {
			t.Errorf("the window's second charge moved the expiry from %d ms to %d ms", first, e)
		}
		break
	}
	for window() == w {
		time.Sleep(time.Millisecond)
	}
	apply(t, s, charge)
	if e := check("charge in the next window"); e <= first {
		t.Errorf("a charge in the next window left the expiry at %d ms, was %d ms: want it later, with the bucket's rest", e, first)
	}
}

// TestStoredFixedWindow: a fixed window's stored state, charged again and
// again in its window (alone and beside another bucket in one request) and
// then in the next window, is always the whole state docs/redis.md
// describes: t the window's start, n the window's count, m 0, restAt the
// window's end.
func TestStoredFixedWindow(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	c := clock.NewFake(t0 + int64(1500*time.Millisecond))
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "fw:"}, c)

	period := time.Minute + 7*time.Microsecond // windows start between milliseconds
	fixed := mustLimit(t, algorithms.FixedWindow, 10, period, 0)
	token := mustLimit(t, algorithms.TokenBucket, 10, time.Second, 0)
	key, other := engineKey("shop", "fixed"), engineKey("shop", "token")
	one := func(cost int64) []store.Charge {
		return []store.Charge{{Domain: "shop", Key: key, Limit: fixed, Cost: cost}}
	}
	two := func(cost int64) []store.Charge {
		return append(one(cost), store.Charge{Domain: "shop", Key: other, Limit: token, Cost: 1})
	}
	check := func(what string, wantN float64) {
		t.Helper()
		start := c.Now() / int64(period) * int64(period)
		tt, n, m, restAt := storedState(t, admin, "fw:{shop}"+string(key))
		if tt != start || n != wantN || m != 0 || restAt != start+int64(period) {
			t.Errorf("%s: stored t=%d n=%v m=%v restAt=%d, want t=%d n=%v m=0 restAt=%d", what, tt, n, m, restAt, start, wantN, start+int64(period))
		}
	}
	steps := []struct {
		what    string
		advance time.Duration
		charges []store.Charge
		wantN   float64
	}{
		{"first charge", 0, one(1), 1},
		{"one charge in the window", time.Second, one(2), 3},
		{"two charges in the window", time.Second, two(3), 6},
		{"a peek", time.Second, one(0), 6},
		{"denied", time.Second, one(5), 6},
		{"denied beside another bucket", time.Second, two(5), 6},
		{"the next window", period, two(4), 4},
		{"again", time.Second, one(1), 5},
	}
	for _, st := range steps {
		c.Set(c.Now() + int64(st.advance))
		apply(t, s, st.charges...)
		check(st.what, st.wantN)
	}
}

// storedState decodes the bucket state stored under key, as docs/redis.md
// describes it (41 bytes, little-endian: a format byte 1, t as float64
// milliseconds and uint32 nanoseconds, n and m as float64, restAt as t
// is): t and restAt in nanoseconds, n and m.
func storedState(t *testing.T, c goredis.UniversalClient, key string) (tNs int64, n, m float64, restAt int64) {
	t.Helper()
	v := []byte(get(t, c, key))
	if len(v) != 41 || v[0] != 1 {
		t.Fatalf("key %q holds %q, want a state of 41 bytes starting with 1", key, v)
	}
	at := func(i int) int64 {
		ms := math.Float64frombits(binary.LittleEndian.Uint64(v[i:]))
		sub := binary.LittleEndian.Uint32(v[i+8:])
		// A bucket's times are at most MaxTime + MaxSpan = MaxInt64 (a
		// backlog of MaxSpan at MaxTime).
		if ms != math.Trunc(ms) || ms < 0 || ms > float64(math.MaxInt64/1e6) || sub >= 1e6 {
			t.Fatalf("key %q: %v ms + %d ns at byte %d is not a time", key, ms, sub, i)
		}
		return int64(ms)*1e6 + int64(sub)
	}
	return at(1), math.Float64frombits(binary.LittleEndian.Uint64(v[13:])), math.Float64frombits(binary.LittleEndian.Uint64(v[21:])), at(29)
}

// TestExpiryOnTheStoresClock: on a clock of the store's (Config.Clock),
// here a fake one years from Redis's, the scripts decide at its time and a
// key expires when its bucket is back at rest on that clock, counted from
// its now (PX), whatever Redis's clock says; with Config.Linger, the key
// outlives the rest by the linger. A bad Linger is refused.
func TestExpiryOnTheStoresClock(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	c := clock.NewFake(time.Date(2031, 5, 1, 12, 0, 0, 500, time.UTC).UnixNano())
	limit := mustLimit(t, algorithms.TokenBucket, 10, time.Hour, 0) // a token every 6 minutes
	tests := []struct {
		linger time.Duration
		want   time.Duration // the key's time to live after a charge of 1
	}{
		{0, 6 * time.Minute},
		{time.Hour, 6*time.Minute + time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.linger.String(), func(t *testing.T) {
			r, err := redis.New(redis.Config{Addr: srv.Addr(), KeyPrefix: "clk:" + tt.linger.String() + ":", Clock: c, Linger: tt.linger})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			key := engineKey("shop", "clock")
			redisKey := "clk:" + tt.linger.String() + ":{shop}" + string(key)
			d := make([]algorithms.Decision, 1)
			if err := r.Apply(ctx, []store.Charge{{Domain: "shop", Key: key, Limit: limit, Cost: 1}}, d); err != nil {
				t.Fatal(err)
			}
			if d[0].Code != algorithms.Allowed || d[0].ResetAfter != 6*time.Minute {
				t.Fatalf("charge: %+v, want admitted, at rest in 6m", d[0])
			}
			if _, _, _, restAt := storedState(t, admin, redisKey); restAt != c.Now()+int64(6*time.Minute) {
				t.Errorf("stored restAt=%d, want 6m after the fake clock's %d", restAt, c.Now())
			}
			ttl, err := admin.PTTL(ctx, redisKey).Result()
			if err != nil || ttl > tt.want+time.Millisecond || ttl < tt.want-time.Second {
				t.Errorf("the key expires in %v (%v), want %v from now", ttl, err, tt.want)
			}
		})
	}
	for _, linger := range []time.Duration{-time.Millisecond, redis.MaxLinger + time.Millisecond} {
		if r, err := redis.New(redis.Config{Addr: srv.Addr(), Linger: linger}); err == nil || !strings.Contains(err.Error(), "linger") {
			if r != nil {
				r.Close()
			}
			t.Errorf("a linger of %v: %v, want an error naming the linger", linger, err)
		}
	}
}

// TestConcurrencyKeyExpiry: a concurrency's key lives until its newest
// unit expires by its lease, and no longer: a unit charged in a later
// generation moves the expiry to that unit's, a release of the oldest unit
// leaves it, and the release of the last unit deletes the key.
func TestConcurrencyKeyExpiry(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "conc:"}, nil)
	l := mustLimit(t, algorithms.Concurrency, 5, 6*time.Second, 0) // generations of 1s
	key := engineKey("llm", "tenant")
	redisKey := "conc:{llm}" + string(key)
	charge := func(kind algorithms.Kind) algorithms.Decision {
		t.Helper()
		return apply(t, s, store.Charge{Domain: "llm", Key: key, Limit: l, Cost: 1, Kind: kind})[0]
	}
	// expiry returns the key's expiry, checking that it is when the newest
	// unit expires (the decision's ResetAfter after the script ran),
	// rounded up to the millisecond.
	expiry := func(what string, d algorithms.Decision, before, after int64) int64 {
		t.Helper()
		restAt, expireMs := storedRest(t, admin, redisKey)
		if ran := restAt - int64(d.ResetAfter); ran < before || ran > after {
			t.Fatalf("%s: stored restAt %d is %v after %d, outside the script's run [%d, %d]", what, restAt, d.ResetAfter, ran, before, after)
		}
		if !expiresAtRest(expireMs, restAt) {
			t.Fatalf("%s: the key expires at %d ms, its last unit at %d ns", what, expireMs, restAt)
		}
		return expireMs
	}

	before := redisNow(t, admin)
	first := expiry("the first unit", charge(algorithms.Admit), before, redisNow(t, admin))
	// The next generation starts within a second.
	for redisNow(t, admin)/int64(time.Second) == before/int64(time.Second) {
		time.Sleep(10 * time.Millisecond)
	}
	before = redisNow(t, admin)
	second := expiry("a unit a generation later", charge(algorithms.Admit), before, redisNow(t, admin))
	if second <= first {
		t.Fatalf("a unit of a later generation left the key's expiry at %d ms, was %d", second, first)
	}
	before = redisNow(t, admin)
	d := charge(algorithms.Refund) // releases the first unit, the oldest
	if e := expiry("after releasing the oldest unit", d, before, redisNow(t, admin)); e != second {
		t.Fatalf("releasing the oldest unit moved the expiry from %d ms to %d ms", second, e)
	}
	if d := charge(algorithms.Refund); d.Remaining != 5 || d.ResetAfter != 0 {
		t.Fatalf("releasing the last unit: %+v, want all 5 free", d)
	}
	if n, err := admin.Exists(context.Background(), redisKey).Result(); err != nil || n != 0 {
		t.Fatalf("the key after the last unit's release: exists %d, %v; want deleted", n, err)
	}
}
