package daemon_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const sharedPolicy = `
domain: shared
descriptors:
  - key: tenant
    rate_limit: {name: per-tenant, algorithm: sliding_window, unit: hour, requests_per_unit: 25}
  - key: api
    rate_limit: {name: api, algorithm: token_bucket, unit: hour, requests_per_unit: 1000, burst: 1000}
`

// withRedis makes a daemon keep its buckets in the Redis at addr, with a
// timeout that a loaded test machine does not reach while Redis answers.
func withRedis(addr string, mode guard.FailureMode) func(*daemon.Config) {
	return func(c *daemon.Config) {
		c.Store = "redis"
		c.Redis = redisstore.Config{Addr: addr, Timeout: 2 * time.Second}
		c.RedisGuard.FailureMode = mode
	}
}

// TestTwoDaemonsShareOneRedis: callers spread over two daemons that share a
// Redis are admitted exactly the bound of a shared key, all or nothing
// across the request's two buckets.
func TestTwoDaemonsShareOneRedis(t *testing.T) {
	srv := redistest.Start(t)
	var clients []rl.RateLimitServiceClient
	for range 2 {
		d := daemontest.Start(t, sharedPolicy, withRedis(srv.Addr(), guard.FailClosed))
		clients = append(clients, rl.NewRateLimitServiceClient(d.Dial(t)))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%2]
			for range 5 {
				r, err := c.ShouldRateLimit(context.Background(), req("shared", desc("api", "v1"), desc("tenant", "acme")))
				if err != nil {
					t.Error(err)
					return
				}
				if r.OverallCode == rl.Code_CODE_OK {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 25 {
		t.Fatalf("two daemons admitted %d of 80, want exactly 25", got)
	}
	// The api bucket was charged by the admitted requests only.
	r, err := clients[1].ShouldRateLimit(context.Background(), req("shared", peek(desc("api", "v1"))))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Statuses[0].Remaining; got != 975 {
		t.Fatalf("api bucket: %d remaining, want 975 (1000 less the 25 admitted)", got)
	}
}

// TestRedisStoppedMidRun: while Redis is down the daemon answers by its
// failure mode, says so in health and metrics, and decides from Redis
// again once it is back.
func TestRedisStoppedMidRun(t *testing.T) {
	tests := []struct {
		mode     guard.FailureMode
		wantCode rl.Code
	}{
		{guard.FailOpen, rl.Code_CODE_OK},
		{guard.FailClosed, rl.Code_CODE_OVER_LIMIT},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			d := daemontest.Start(t, sharedPolicy, withRedis(srv.Addr(), tt.mode))
			conn := d.Dial(t)
			client := rl.NewRateLimitServiceClient(conn)
			health := healthpb.NewHealthClient(conn)
			call := func() *rl.ShouldRateLimitResponse {
				t.Helper()
				r, err := client.ShouldRateLimit(context.Background(), req("shared", desc("tenant", "acme")))
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v", err)
				}
				return r
			}
			redisHealth := func() healthpb.HealthCheckResponse_ServingStatus {
				r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: daemon.RedisHealthService})
				if err != nil {
					t.Fatal(err)
				}
				return r.Status
			}
			for range 25 {
				call()
			}
			if r := call(); r.OverallCode != rl.Code_CODE_OVER_LIMIT {
				t.Fatalf("26th call: %v, want over limit", r.OverallCode)
			}

			srv.Stop()
			if r := call(); r.OverallCode != tt.wantCode {
				t.Errorf("Redis down, failing %v: %v, want %v", tt.mode, r.OverallCode, tt.wantCode)
			}
			wait.For(t, "gRPC health of redis NOT_SERVING", func() bool { return redisHealth() == healthpb.HealthCheckResponse_NOT_SERVING })
			if code, body := d.Get(t, "/healthz/redis"); code != http.StatusServiceUnavailable {
				t.Errorf("/healthz/redis with Redis down: %d %s", code, body)
			}
			if _, body := d.Get(t, "/metrics"); !strings.Contains(body, `ratelimitd_redis_up{failure_mode="`+tt.mode.String()+`"} 0`) ||
				strings.Contains(body, "ratelimitd_redis_fallback_decisions_total 0") {
				t.Errorf("metrics with Redis down do not say so:\n%s", grep(body, "ratelimitd_redis_"))
			}
			if code, _ := d.Get(t, "/readyz"); code != http.StatusOK {
				t.Errorf("/readyz with Redis down: %d; the daemon still answers", code)
			}

			srv.Restart() // empty: the tenant starts over
			wait.For(t, "gRPC health of redis SERVING", func() bool { return redisHealth() == healthpb.HealthCheckResponse_SERVING })
			if r := call(); r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Remaining != 24 {
				t.Errorf("after Redis came back: %v with %d remaining, want OK with 24", r.OverallCode, r.Statuses[0].Remaining)
			}
			if code, _ := d.Get(t, "/healthz/redis"); code != http.StatusOK {
				t.Errorf("/healthz/redis after recovery: %d", code)
			}
		})
	}
}

func grep(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestShutdownWhileRedisHangs: with a call in flight to a Redis that holds
// every script (CLIENT PAUSE) and a Redis timeout of a minute, shutdown
// ends with the grace (here 300ms): the call is cut off, the daemon stops,
// and it says so in its log.
func TestShutdownWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	d := daemontest.Start(t, sharedPolicy, func(c *daemon.Config) {
		c.Store = "redis"
		c.Redis = redisstore.Config{Addr: srv.Addr(), Timeout: time.Minute}
		c.RedisGuard.FailureMode = guard.FailOpen
		c.ShutdownGrace = 300 * time.Millisecond
	})
	client := rl.NewRateLimitServiceClient(d.Dial(t))
	if _, err := client.ShouldRateLimit(context.Background(), req("shared", desc("api", "v1"))); err != nil {
		t.Fatal(err) // the first call loads the script
	}
	if reply, err := srv.Command("CLIENT", "PAUSE", "60000", "WRITE"); err != nil || reply != "+OK" {
		t.Fatalf("CLIENT PAUSE: %q %v", reply, err)
	}
	t.Cleanup(func() { srv.Command("CLIENT", "UNPAUSE") })

	ended := make(chan error, 1)
	go func() {
		_, err := client.ShouldRateLimit(context.Background(), req("shared", desc("api", "v1")))
		ended <- err
	}()
	wait.For(t, "two Redis requests counted", func() bool {
		_, body := d.Get(t, "/metrics")
		return strings.Contains(body, "ratelimitd_redis_requests_total 2")
	})

	stopped := make(chan struct{})
	go func() {
		d.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("shutdown did not end within 20s while Redis hangs; it waits for the Redis timeout (a minute)")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not end with the shutdown")
	}
	if !strings.Contains(d.Logs(), "shutdown grace period over") || !strings.Contains(d.Logs(), "stopped") {
		t.Errorf("the log does not say the grace ended and the daemon stopped:\n%s", d.Logs())
	}
}

// TestQuotaDaemonsWithRedis: a static division of quota limits is refused
// on the redis store, whose daemons share them by demand.
func TestQuotaDaemonsWithRedis(t *testing.T) {
	_, err := daemon.Start(daemon.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: "redis",
		Redis: redisstore.Config{Addr: "127.0.0.1:1"}, QuotaDaemons: 2})
	if err == nil || !strings.Contains(err.Error(), "--quota-daemons 2 with --store redis") {
		t.Fatalf("started with --quota-daemons 2 on redis: %v", err)
	}
}

// TestRedisUpstreamCounters: with the Redis store's Counters (the
// daemon's --redis-key-layout upstream), a fixed window continues the count
// envoyproxy/ratelimit left under its key, and keeps it there; a token
// bucket keeps ratelimitd's own key.
func TestRedisUpstreamCounters(t *testing.T) {
	srv := redistest.Start(t)
	const policy = `
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: api
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 1000, burst: 1000}
`
	// 20s into a minute, on the daemon's clock, which names the window.
	now := time.Date(2026, 1, 1, 10, 0, 20, 0, time.UTC)
	d := daemontest.Start(t, policy, func(c *daemon.Config) {
		c.Store = "redis"
		c.Redis = redisstore.Config{Addr: srv.Addr(), Timeout: 2 * time.Second, Counters: true, Clock: clock.NewFake(now.UnixNano())}
	})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	key := "shared_user_alice_" + strconv.FormatInt(now.Truncate(time.Minute).Unix(), 10)
	rdb.IncrBy(ctx, key, 3) // upstream's count

	client := rl.NewRateLimitServiceClient(d.Dial(t))
	r, err := client.ShouldRateLimit(ctx, req("shared", desc("user", "alice"), desc("api", "v1")))
	if err != nil {
		t.Fatal(err)
	}
	if r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Remaining != 1 {
		t.Fatalf("after upstream's 3 of 5: %v, user %d remaining; want OK, 1 remaining", r.OverallCode, r.Statuses[0].Remaining)
	}
	if got := rdb.Get(ctx, key).Val(); got != "4" {
		t.Errorf("%s = %q, want \"4\"", key, got)
	}
	// The buckets' keys, besides those the store's check at start writes.
	keys := slices.DeleteFunc(rdb.Keys(ctx, "*").Val(), func(k string) bool { return strings.HasPrefix(k, "{ratelimitd-check}") })
	if len(keys) != 2 || !slices.Contains(keys, key) || !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "{shared}") }) {
		t.Errorf("keys %q: want upstream's counter and the token bucket's own key, without a prefix", keys)
	}
}
