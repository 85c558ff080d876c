package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestReplacesUpstreamOnItsRedis: the built daemon with --redis-key-layout
// upstream, on the Redis envoyproxy/ratelimit counted in, continues
// upstream's count under upstream's key (no prefix, as upstream's default
// CACHE_KEY_PREFIX), and upstream's INCRBY continues the daemon's.
func TestReplacesUpstreamOnItsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	policy := filepath.Join(t.TempDir(), "ai.yaml")
	if err := os.WriteFile(policy, []byte("domain: ai\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "--config", policy, "--store", "redis", "--redis-addr", srv.Addr(), "--redis-key-layout", "upstream")
	c := envoyClient(t, p)
	ctx := context.Background()
	call := func(user string) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// upstream's key for the day, on the real clock the daemon decides on.
	dayKey := func(user string) string {
		return "ai_user_" + user + "_" + strconv.FormatInt(time.Now().UTC().Truncate(24*time.Hour).Unix(), 10)
	}
	// A day's window ends while the test runs at most once: the user of an
	// attempt that spans midnight (UTC) starts over as another.
	for attempt := range 2 {
		user := "alice" + strconv.Itoa(attempt)
		key := dayKey(user)
		rdb.IncrBy(ctx, key, 3) // upstream's count
		rdb.Expire(ctx, key, 24*time.Hour)
		first := call(user)
		got := rdb.Get(ctx, key).Val()
		rdb.IncrBy(ctx, key, 1) // upstream counts one more
		second := call(user)
		if dayKey(user) != key {
			continue
		}
		if first.OverallCode != rlsv3.RateLimitResponse_OK || first.Statuses[0].LimitRemaining != 1 {
			t.Errorf("after upstream's 3 of 5: %v with %d remaining, want OK with 1", first.OverallCode, first.Statuses[0].LimitRemaining)
		}
		if got != "4" {
			t.Errorf("%s = %q after the daemon's charge, want \"4\"", key, got)
		}
		if second.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("after 5 of 5 (the last upstream's): %v, want OVER_LIMIT", second.OverallCode)
		}
		return
	}
	t.Fatal("two attempts each spanned midnight")
}
