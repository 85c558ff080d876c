package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestBreakerWithHungRedis: a real redis-server that holds every script
// (CLIENT PAUSE) times out two requests in a row; the breaker opens, and
// the requests that follow are decided by the failure mode at once,
// without asking Redis, and health says so; a ping does not close it.
// After the cool-off (on the store's fake clock) one request probes: while
// Redis still hangs it fails and the breaker opens again; once Redis
// answers, Run's ping probes with the script and closes it, and requests
// are decided from Redis again.
func TestBreakerWithHungRedis(t *testing.T) {
	srv := redistest.Start(t)
	local := clock.NewFake(t0)
	s := newGuardedStore(t, redis.Config{Addr: srv.Addr(), Timeout: 100 * time.Millisecond}, guard.Config{FailureMode: guard.FailClosed, BreakerFailures: 2, BreakerCooloff: 5 * time.Second, Clock: local}, nil)
	l := mustLimit(t, algorithms.TokenBucket, 10, time.Second, 0)
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "hung"), Limit: l, Cost: 1}
	failed := algorithms.Decision{Code: algorithms.Denied, RetryAfter: guard.FailClosedRetryAfter}
	if d := apply(t, s, charge); d[0].Code != algorithms.Allowed {
		t.Fatalf("Redis answering: %+v, want allowed", d[0])
	}

	pause(t, srv)
	for i := range 2 {
		if d := apply(t, s, charge); d[0] != failed {
			t.Fatalf("timed-out request %d: %+v, want the failure mode's denial", i, d[0])
		}
	}
	if got := s.Breaker(); got != guard.BreakerOpen {
		t.Fatalf("after two timeouts in a row the breaker is %v, want open", got)
	}
	asked := s.Applies()
	for i := range 20 {
		if d := apply(t, s, charge); d[0] != failed {
			t.Fatalf("request %d with the breaker open: %+v, want the failure mode's denial", i, d[0])
		}
	}
	if got := s.Applies() - asked; got != 0 {
		t.Errorf("with the breaker open %d requests asked Redis, want none", got)
	}
	if up, why := s.Healthy(); up || !strings.Contains(why, "circuit breaker open") {
		t.Errorf("Healthy() = %v, %q; want down, saying the breaker is open", up, why)
	}
	// While the breaker cools off, a ping asks nothing and closes nothing.
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("Ping with the breaker open and cooling off: no error")
	}
	if up, _ := s.Healthy(); up || s.Breaker() != guard.BreakerOpen {
		t.Errorf("after a PONG from a Redis that holds scripts: up %v, breaker %v; want down and open", up, s.Breaker())
	}

	// The cool-off passes while Redis still hangs: the probe times out.
	local.Advance(5 * time.Second)
	apply(t, s, charge)
	if got := s.Applies() - asked; got != 1 {
		t.Errorf("after the cool-off %d requests asked Redis, want one probe", got)
	}
	if got := s.Breaker(); got != guard.BreakerOpen {
		t.Fatalf("after the probe failed the breaker is %v, want open again", got)
	}

	unpause(t, srv)
	if d := apply(t, s, charge); d[0] != failed || s.Applies()-asked != 1 {
		t.Errorf("Redis back but the cool-off not over: %+v, %d asked; want the failure mode, no new request to Redis", d[0], s.Applies()-asked)
	}
	// After the cool-off, Run's ping probes with the script, without any
	// request: Redis answers, the breaker closes.
	local.Advance(5 * time.Second)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("the probing ping after Redis is back: %v", err)
	}
	if got := s.Breaker(); got != guard.BreakerClosed {
		t.Errorf("after a successful probe the breaker is %v, want closed", got)
	}
	if up, why := s.Healthy(); !up {
		t.Errorf("Healthy() = false, %q after the breaker closed", why)
	}
	if d := apply(t, s, charge); d[0].Code != algorithms.Allowed || s.Applies()-asked != 2 {
		t.Errorf("after the breaker closed: %+v, %d asked; want allowed from Redis", d[0], s.Applies()-asked)
	}
}
