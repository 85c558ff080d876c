package redis_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

var prefixes atomic.Int64

// newTestStore returns a store as cfg says, with keys under a prefix of its
// own unless cfg names one, a timeout of 10s unless cfg sets one (so that
// a loaded machine does not turn a test's requests into failures), and
// deciding at c's time (nil: Redis TIME).
func newTestStore(t *testing.T, cfg redis.Config, c clock.Clock) *redis.Store {
	t.Helper()
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = fmt.Sprintf("test%d:", prefixes.Add(1))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	s, err := redis.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if c != nil {
		redis.SetTestClock(s, c)
	}
	return s
}

// TestConformance runs the suite that every store passes alike, against
// a real redis-server: the same decisions as the memory store and as
// store.Settle, at every edge case and on random timelines.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, c *clock.Fake) store.Store {
		return newTestStore(t, redis.Config{Addr: srv.Addr()}, c)
	}, storetest.Options{})
}
