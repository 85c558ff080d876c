package redis_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const t0 = int64(1_767_225_600_000_000_000)

// mustLimit and apply are the conformance suite's helpers: apply fails a
// charge that names no domain, as the engine names every charge's.
var mustLimit, apply = storetest.MustLimit, storetest.Apply

// engineKey is a bucket key shaped as the engine makes them:
// length-prefixed domain, entries and limit key.
func engineKey(domain string, parts ...string) []byte {
	var b []byte
	for _, p := range append([]string{domain}, parts...) {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// TestOneRoundTripPerApply: a request costs one round trip to Redis
// whatever its number of charges — and still one when Redis has lost the
// script, since EVAL on NOSCRIPT is the second of two only then.
func TestOneRoundTripPerApply(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestStore(t, redis.Config{Addr: srv.Addr()}, nil)
	l := mustLimit(t, algorithms.TokenBucket, 1000, time.Hour, 0)
	charges := func(n int) []store.Charge {
		var cs []store.Charge
		for i := range n {
			cs = append(cs, store.Charge{Domain: "shop", Key: engineKey("shop", "user", fmt.Sprint(i)), Limit: l, Cost: 1})
		}
		return cs
	}
	apply(t, s, charges(1)...) // the first loads the script (EVALSHA, NOSCRIPT, EVAL)
	for _, n := range []int{1, 2, 5, 16, 40} {
		before := s.RoundTrips()
		apply(t, s, charges(n)...)
		if got := s.RoundTrips() - before; got != 1 {
			t.Errorf("a request of %d charges took %d round trips, want 1", n, got)
		}
	}
	if _, err := srv.Command("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	before := s.RoundTrips()
	if d := apply(t, s, charges(3)...); d[0].Code != algorithms.Allowed || d[0].Remaining != 993 {
		t.Fatalf("after SCRIPT FLUSH: %+v, want allowed with 993 remaining", d[0])
	}
	if got := s.RoundTrips() - before; got != 2 {
		t.Errorf("after SCRIPT FLUSH the request took %d round trips, want 2 (EVALSHA, then EVAL)", got)
	}
}

// TestRedisTime: without an injected clock the script decides on Redis
// TIME, and a peek stores nothing. (TestExpiry checks the keys' expiry.)
func TestRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "rt:"}, nil)
	hour := mustLimit(t, algorithms.TokenBucket, 5, time.Hour, 0) // one per 12 minutes
	key := engineKey("shop", "user", "alice")

	if d := apply(t, s, store.Charge{Domain: "shop", Key: key, Limit: hour, Cost: 0}); d[0] != (algorithms.Decision{Remaining: 5}) {
		t.Fatalf("peek of a new bucket: %+v", d[0])
	}
	if n, _ := srv.Command("EXISTS", "rt:{shop}"+string(key)); n != ":0" {
		t.Fatalf("a peek stored a key (EXISTS: %s)", n)
	}
	for i := range 5 {
		if d := apply(t, s, store.Charge{Domain: "shop", Key: key, Limit: hour, Cost: 1}); d[0].Code != algorithms.Allowed || d[0].Remaining != int64(4-i) {
			t.Fatalf("charge %d: %+v", i, d[0])
		}
	}
	d := apply(t, s, store.Charge{Domain: "shop", Key: key, Limit: hour, Cost: 1})
	if d[0].Code != algorithms.Denied || d[0].RetryAfter <= 11*time.Minute || d[0].RetryAfter > 12*time.Minute {
		t.Fatalf("sixth charge: %+v, want denied with about 12 minutes to wait", d[0])
	}
}

// TestOneClock: two stores sharing a Redis decide on its clock, whatever
// their own: b's clock (the guard's Clock) is a day and a half ahead of a's,
// yet both charge the same daily window and see it end at the same
// instant, Redis's midnight.
func TestOneClock(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	a := newTestStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "clock:"}, nil)
	ahead := clock.NewFake(time.Now().Add(36 * time.Hour).UnixNano())
	b := newGuardedStore(t, redis.Config{Addr: srv.Addr(), KeyPrefix: "clock:"}, guard.Config{Clock: ahead}, nil)
	day := 24 * time.Hour
	l := mustLimit(t, algorithms.FixedWindow, 10, day, 0)
	charge := func(cost int64) store.Charge {
		return store.Charge{Domain: "shop", Key: engineKey("shop", "path", "/"), Limit: l, Cost: cost}
	}

	apply(t, a, charge(6))
	if d := apply(t, b, charge(5)); d[0].Code != algorithms.Denied || d[0].Remaining != 4 {
		t.Fatalf("the daemon a day and a half ahead: %+v, want denied with 4 remaining (the window a charged)", d[0])
	}
	if d := apply(t, b, charge(4)); d[0].Code != algorithms.Allowed || d[0].Remaining != 0 {
		t.Fatalf("the daemon a day and a half ahead: %+v, want allowed with 0 remaining", d[0])
	}
	for name, s := range map[string]*testStore{"a": a, "b (ahead)": b} {
		before := redisNow(t, admin)
		d := apply(t, s, charge(0))[0]
		after := redisNow(t, admin)
		midnight := (after/int64(day) + 1) * int64(day) // Redis's
		if ran := midnight - int64(d.ResetAfter); ran < before || ran > after {
			t.Errorf("store %s: the window ends %v after the script ran, not at Redis's midnight (%v to %v away)",
				name, d.ResetAfter, time.Duration(midnight-after), time.Duration(midnight-before))
		}
	}
}

// TestFailureModes: with Redis stopped, each mode decides as it says, the
// store reports itself down, and when Redis is back (empty, without the
// script) the store decides from Redis again, by itself. (A breaker that
// never opens: the guard's clock is the test's, which stands still.
// TestBreakerWithHungRedis tests the breaker.)
func TestFailureModes(t *testing.T) {
	l := mustLimit(t, algorithms.FixedWindow, 3, time.Hour, 0)
	key := engineKey("shop", "user", "bob")
	tests := []struct {
		mode guard.FailureMode
		want []algorithms.Decision // for costs 1, 0 and 4 while Redis is down
	}{
		{guard.FailOpen, []algorithms.Decision{{Remaining: 2, ResetAfter: time.Hour}, {Remaining: 3}, {Code: algorithms.OverCapacity, Remaining: 3}}},
		{guard.FailClosed, []algorithms.Decision{{Code: algorithms.Denied, RetryAfter: guard.FailClosedRetryAfter}, {}, {Code: algorithms.OverCapacity}}},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			var mu sync.Mutex
			var changes []bool
			c := clock.NewFake(t0)
			s := newGuardedStore(t, redis.Config{Addr: srv.Addr(), Timeout: 200 * time.Millisecond}, guard.Config{FailureMode: tt.mode, BreakerFailures: 1 << 30, OnHealth: func(up bool, err error) { mu.Lock(); changes = append(changes, up); mu.Unlock() }}, c)
			apply(t, s, store.Charge{Domain: "shop", Key: key, Limit: l, Cost: 3})

			srv.Stop()
			for i, cost := range []int64{1, 0, 4} {
				if d := apply(t, s, store.Charge{Domain: "shop", Key: key, Limit: l, Cost: cost}); d[0] != tt.want[i] {
					t.Errorf("Redis down, cost %d: %+v, want %+v", cost, d[0], tt.want[i])
				}
			}
			if up, why := s.Healthy(); up || why == "" {
				t.Errorf("Healthy() = %v, %q with Redis down", up, why)
			}

			srv.Restart()
			wait.For(t, "a ping to answer after the restart", func() bool { return s.Ping(context.Background()) == nil })
			// Redis restarted empty: the bucket starts over, from Redis.
			if d := apply(t, s, store.Charge{Domain: "shop", Key: key, Limit: l, Cost: 3}); d[0].Code != algorithms.Allowed || d[0].Remaining != 0 {
				t.Errorf("after restart: %+v, want allowed with 0 remaining", d[0])
			}
			if d := apply(t, s, store.Charge{Domain: "shop", Key: key, Limit: l, Cost: 1}); d[0].Code != algorithms.Denied {
				t.Errorf("after restart, over the limit: %+v, want denied", d[0])
			}
			if up, _ := s.Healthy(); !up {
				t.Error("Healthy() false after Redis came back")
			}
			wait.For(t, "OnHealth to report down, then up", func() bool { mu.Lock(); defer mu.Unlock(); return len(changes) == 2 })
			if changes[0] || !changes[1] {
				t.Errorf("OnHealth saw %v, want [false true]", changes)
			}
		})
	}
}

// TestTimeout: Redis that answers later than the timeout is a failure:
// Apply returns no error, the request is decided by the failure mode, and
// the store reports the timeout as what went wrong.
func TestTimeout(t *testing.T) {
	srv := redistest.Start(t)
	failures := make(chan error, 1)
	s := newGuardedStore(t, redis.Config{Addr: srv.Addr(), Timeout: 100 * time.Millisecond}, guard.Config{FailureMode: guard.FailClosed, OnHealth: func(up bool, err error) {
		if !up {
			failures <- err
		}
	}}, clock.NewFake(t0))
	l := mustLimit(t, algorithms.TokenBucket, 10, time.Second, 0)
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "slow"), Limit: l, Cost: 1}
	apply(t, s, charge)
	pause(t, srv) // scripts wait; the store gives up after its timeout
	if d := apply(t, s, charge); d[0] != (algorithms.Decision{Code: algorithms.Denied, RetryAfter: guard.FailClosedRetryAfter}) {
		t.Errorf("paused Redis, failing closed: %+v, want the failure mode's denial", d[0])
	}
	if up, why := s.Healthy(); up || why == "" {
		t.Errorf("Healthy() = %v, %q after a timeout", up, why)
	}
	select {
	case err := <-failures:
		if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("OnHealth reported %v, want the timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnHealth was not told of the timeout")
	}
	unpause(t, srv)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after Redis answers again: %v", err)
	}
	if up, _ := s.Healthy(); !up {
		t.Error("Healthy() false after a successful Ping")
	}
}

// pause makes srv hold every script (CLIENT PAUSE ... WRITE) until unpause
// or the end of the test; PING and CLIENT still answer.
func pause(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if reply, err := srv.Command("CLIENT", "PAUSE", "60000", "WRITE"); err != nil || reply != "+OK" {
		t.Fatalf("CLIENT PAUSE: %q %v", reply, err)
	}
	t.Cleanup(func() { srv.Command("CLIENT", "UNPAUSE") })
}

func unpause(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if reply, err := srv.Command("CLIENT", "UNPAUSE"); err != nil || reply != "+OK" {
		t.Fatalf("CLIENT UNPAUSE: %q %v", reply, err)
	}
}

// TestCallerContext: when the caller gives up first, Apply returns its
// error rather than a failure-mode decision.
func TestCallerContext(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestStore(t, redis.Config{Addr: srv.Addr()}, clock.NewFake(t0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := mustLimit(t, algorithms.TokenBucket, 10, time.Second, 0)
	err := s.Apply(ctx, []store.Charge{{Domain: "shop", Key: engineKey("shop"), Limit: l, Cost: 1}}, make([]algorithms.Decision, 1))
	if err == nil {
		t.Fatal("Apply with a canceled context returned no error")
	}
	if up, _ := s.Healthy(); !up {
		t.Error("a caller's cancellation marked Redis down")
	}
}

// TestDenyCache: once a bucket denies, requests that charge it again are
// denied without asking Redis, with the exact wait left, until that wait
// has passed; shadow charges and peeks are never answered from the cache.
func TestDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	c := clock.NewFake(t0)
	s := newGuardedStore(t, redis.Config{Addr: srv.Addr()}, guard.Config{DenyCache: 100}, c)
	l := mustLimit(t, algorithms.TokenBucket, 1, time.Second, 2)
	other := mustLimit(t, algorithms.FixedWindow, 100, time.Minute, 0)
	attacker := engineKey("shop", "ip", "10.0.0.66")
	page := engineKey("shop", "path", "/")
	req := func(cost int64) []store.Charge {
		return []store.Charge{{Domain: "shop", Key: page, Limit: other, Cost: 1}, {Domain: "shop", Key: attacker, Limit: l, Cost: cost}}
	}
	apply(t, s, req(2)...)
	if d := apply(t, s, req(1)...); d[1].Code != algorithms.Denied || d[1].RetryAfter != time.Second {
		t.Fatalf("over the limit: %+v", d[1])
	}
	before := s.RoundTrips()
	c.Set(t0 + int64(400*time.Millisecond))
	d := apply(t, s, req(1)...)
	if s.RoundTrips() != before {
		t.Fatal("a request over a remembered limit reached Redis")
	}
	if d[1].Code != algorithms.Denied || d[1].RetryAfter != 600*time.Millisecond {
		t.Errorf("from the cache: %+v, want denied, retry after 600ms", d[1])
	}
	if d[0] != (algorithms.Decision{Remaining: 100}) {
		t.Errorf("the other charge of a request denied from the cache: %+v, want a bucket at rest's peek", d[0])
	}
	// A peek, a shadow charge and another cost go to Redis.
	for _, cs := range [][]store.Charge{
		{{Domain: "shop", Key: attacker, Limit: l, Cost: 0}},
		{{Domain: "shop", Key: attacker, Limit: l, Cost: 1, Shadow: true}},
		{{Domain: "shop", Key: attacker, Limit: l, Cost: 2}},
	} {
		before = s.RoundTrips()
		apply(t, s, cs...)
		if s.RoundTrips() == before {
			t.Errorf("%+v was answered from the cache", cs[0])
		}
	}
	// When the wait is over, Redis decides again.
	c.Set(t0 + int64(time.Second))
	before = s.RoundTrips()
	d = apply(t, s, req(1)...)
	if d[1].Code != algorithms.Allowed || s.RoundTrips() == before {
		t.Errorf("after the wait: %+v (round trips %d), want allowed from Redis", d[1], s.RoundTrips()-before)
	}
	if d[0].Remaining != 98 {
		t.Errorf("the page bucket has %d remaining, want 98: the denied requests charged nothing", d[0].Remaining)
	}
}

// TestDenyCacheCountsFromSend: the cache remembers a denial for its
// RetryAfter counted from when the request was sent, however long the
// reply took: it never denies longer than Redis would (Redis counts from
// when the script ran, which is no earlier).
func TestDenyCacheCountsFromSend(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	local := clock.NewFake(t0) // the daemon's clock; Redis decides on its TIME
	s := newGuardedStore(t, redis.Config{Addr: proxy.Addr()}, guard.Config{DenyCache: 10, Clock: local}, nil)
	l := mustLimit(t, algorithms.FixedWindow, 1, time.Hour, 0)
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "ip", "10.0.0.66"), Limit: l, Cost: 1}
	apply(t, s, charge)

	const took = 500 * time.Millisecond
	proxy.BeforeReply(func() { local.Advance(took) }) // the reply takes 500ms
	denial := apply(t, s, charge)[0]
	proxy.BeforeReply(nil)
	if denial.Code != algorithms.Denied || denial.RetryAfter <= took {
		t.Fatalf("over the limit: %+v, want denied", denial)
	}

	before := s.RoundTrips()
	if d := apply(t, s, charge)[0]; s.RoundTrips() != before || d.Code != algorithms.Denied || d.RetryAfter != denial.RetryAfter-took {
		t.Errorf("as the reply arrived: %+v (round trips %d), want denied from the cache with %v left (of %v, counted from the request)",
			d, s.RoundTrips()-before, denial.RetryAfter-took, denial.RetryAfter)
	}
	local.Set(t0 + int64(denial.RetryAfter)) // Redis's wait is over by now
	before = s.RoundTrips()
	apply(t, s, charge)
	if s.RoundTrips() == before {
		t.Errorf("RetryAfter (%v) after the request was sent the cache still denied it, without asking Redis", denial.RetryAfter)
	}
}

// TestBatching: requests that arrive while a round trip is in flight share
// the next one (here Redis's replies are held 5ms each, so that they pile
// up), each still atomic and all or nothing on its own: of 48 callers ×
// 10 requests on a shared bucket of 100 (and a bucket of their own each),
// exactly 100 are admitted, every denied request charged nothing, and the
// round trips are fewer than the requests.
func TestBatching(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	s := newTestStore(t, redis.Config{Addr: proxy.Addr()}, nil)
	shared := mustLimit(t, algorithms.FixedWindow, 100, time.Hour, 0)
	own := mustLimit(t, algorithms.TokenBucket, 1000, time.Hour, 0)
	apply(t, s, store.Charge{Domain: "b", Key: engineKey("b", "warm-up"), Limit: shared}) // loads the script
	proxy.BeforeReply(func() { time.Sleep(5 * time.Millisecond) })

	const callers, each = 48, 10
	trips0, applies0 := s.RoundTrips(), s.Applies()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := engineKey("b", "own", fmt.Sprint(g))
			for range each {
				d := make([]algorithms.Decision, 2)
				err := s.Apply(context.Background(), []store.Charge{
					{Domain: "b", Key: engineKey("b", "shared"), Limit: shared, Cost: 1},
					{Domain: "b", Key: mine, Limit: own, Cost: 1},
				}, d)
				if err != nil {
					t.Error(err)
					return
				}
				if d[0].Code == algorithms.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	proxy.BeforeReply(nil)
	trips, applies := s.RoundTrips()-trips0, s.Applies()-applies0
	t.Logf("%d requests in %d round trips", applies, trips)
	if applies != callers*each || trips >= applies/2 {
		t.Errorf("%d requests took %d round trips; want them batched, at most half as many round trips", applies, trips)
	}
	if got := admitted.Load(); got != 100 {
		t.Errorf("admitted %d, want exactly 100", got)
	}
	// Each caller's own bucket was charged once per admitted request of
	// its own, and never by a denied one: the total charged equals the
	// admitted count.
	var charged int64
	for g := range callers {
		d := apply(t, s, store.Charge{Domain: "b", Key: engineKey("b", "own", fmt.Sprint(g)), Limit: own})
		charged += 1000 - d[0].Remaining
	}
	if charged != 100 {
		t.Errorf("own buckets charged %d times in all, want 100 (one per admitted request)", charged)
	}
}
