package redis_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/algorithms/algotest"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

var prefixes atomic.Int64

// testStore is a Redis store in the guard the daemon wraps it in.
type testStore struct {
	*guard.Guard
	redis *redis.Store
}

// Applies and RoundTrips are the Redis store's counts.
func (s *testStore) Applies() uint64    { return s.redis.Applies() }
func (s *testStore) RoundTrips() uint64 { return s.redis.RoundTrips() }

// Collectors are the Redis store's metrics and its guard's.
func (s *testStore) Collectors() []prometheus.Collector {
	return append(s.redis.Collectors(), s.Guard.Collectors()...)
}

// Close closes the guard and the Redis store.
func (s *testStore) Close() {
	s.Guard.Close()
	s.redis.Close()
}

// newTestStore returns newGuardedStore's store with the guard's defaults.
func newTestStore(t testing.TB, cfg redis.Config, c clock.Clock) *testStore {
	t.Helper()
	return newGuardedStore(t, cfg, guard.Config{}, c)
}

// newGuardedStore returns a store as cfg says, guarded as g says (named
// "redis", as the daemon names it), with keys under a prefix of its own
// unless cfg names one, a timeout of 10s unless cfg sets one (so that a
// loaded machine does not turn a test's requests into failures), and
// deciding at c's time (nil: Redis TIME), which is then also the guard's
// clock unless g names one. On c, whose timelines jump anywhere and stand
// still while Redis's clock runs, keys linger a century (redis.MaxLinger),
// so that none expires under a test. The store has made its connections
// (or failed to).
func newGuardedStore(t testing.TB, cfg redis.Config, g guard.Config, c clock.Clock) *testStore {
	t.Helper()
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = fmt.Sprintf("test%d:", prefixes.Add(1))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if c != nil {
		cfg.Clock, cfg.Linger = c, redis.MaxLinger
		if g.Clock == nil {
			g.Clock = c
		}
	}
	r, err := redis.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The connections' warm-up goes through whatever proxy the test
	// has, before the test does.
	<-redis.Warmed(r)
	g.Name, g.Logger = "redis", cfg.Logger
	gs, err := guard.New(r, g)
	if err != nil {
		t.Fatal(err)
	}
	s := &testStore{Guard: gs, redis: r}
	t.Cleanup(s.Close)
	return s
}

// TestConformance runs the suite that every store passes alike, against
// a real redis-server: the same decisions as the memory store and as
// store.Settle, at every edge case and on random timelines. It also checks
// which path the script took for each case: plain Lua numbers (fast.lua)
// for every ordinary limit and time, bignums for the extreme ones, and
// both on the random timelines, whose decisions then agree with Settle on
// either path.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	stores := make(map[string]*testStore)
	storetest.Run(t, func(t *testing.T, c *clock.Fake) store.Store {
		s := newTestStore(t, redis.Config{Addr: srv.Addr()}, c)
		mu.Lock()
		stores[strings.TrimPrefix(t.Name(), "TestConformance/")] = s
		mu.Unlock()
		return s
	}, storetest.Options{})

	// The edge cases whose products or times do not fit below 2^53: a
	// period of 2^62 or 2^61 ns (MaxSpan) at MaxTime, 10^9 per second
	// with a capacity of 10^9 (Capacity·Period = 10^18) on the buckets and
	// the sliding window, and a bucket's backlog of MaxSpan after an
	// overdraft of MaxInt64; and a bucket of more than one request a
	// nanosecond (Requests above Period), whose debt may pass 2^53. Every
	// other case is decided on plain numbers.
	bignum := map[string]bool{
		"EdgeCases/fixed_window/MaxSpan_at_MaxTime":                true,
		"EdgeCases/token_bucket/MaxSpan_at_MaxTime":                true,
		"EdgeCases/leaky_bucket/MaxSpan_at_MaxTime":                true,
		"EdgeCases/sliding_window/longest_period_at_MaxTime":       true,
		"EdgeCases/token_bucket/1e9_per_second:_1ns_apart":         true,
		"EdgeCases/leaky_bucket/1e9_per_second:_1ns_apart":         true,
		"EdgeCases/sliding_window/1e9_per_second":                  true,
		"EdgeCases/token_bucket/overdraft_of_MaxInt64":             true,
		"EdgeCases/leaky_bucket/overdraft_of_MaxInt64":             true,
		"EdgeCases/token_bucket/MaxRequests_per_nanosecond":        true,
		"EdgeCases/leaky_bucket/MaxRequests_per_nanosecond":        true,
		"EdgeCases/token_bucket/changed_rate_at_the_bound_on_debt": true,
		"EdgeCases/leaky_bucket/changed_rate_at_the_bound_on_debt": true,
	}
	// The edge cases that change a bucket's rate: a charge on a state
	// written at another rate takes bignums (its conversion's products
	// reach 2^95), the others plain numbers.
	converted := make(map[string]bool)
	for _, c := range algotest.Cases() {
		r, changes := c.Requests, false
		for _, st := range c.Steps {
			if st.Change.Requests != 0 && st.Change.Requests != r {
				r, changes = st.Change.Requests, true
			}
		}
		for _, alg := range c.Algorithms {
			if changes && alg != algorithms.FixedWindow && alg != algorithms.SlidingWindow {
				converted["EdgeCases/"+alg.String()+"/"+strings.ReplaceAll(c.Name, " ", "_")] = true
			}
		}
	}
	seen := 0
	for name, s := range stores {
		fast, big := redis.Paths(s.redis)
		switch {
		case strings.HasPrefix(name, "RandomTimelines/"):
			if fast == 0 || big == 0 {
				t.Errorf("%s: %d charges on the fast path, %d on bignums; want both paths taken", name, fast, big)
			}
		case bignum[name]:
			seen++
			if fast != 0 || big == 0 {
				t.Errorf("%s: %d charges on the fast path, %d on bignums; want bignums only", name, fast, big)
			}
		case converted[name]:
			if fast == 0 || big == 0 {
				t.Errorf("%s: %d charges on the fast path, %d on bignums; want both paths taken", name, fast, big)
			}
		default:
			if fast == 0 || big != 0 {
				t.Errorf("%s: %d charges on the fast path, %d on bignums; want the fast path only", name, fast, big)
			}
		}
	}
	if seen != len(bignum) {
		t.Errorf("saw %d of the %d extreme cases: the suite's case names changed", seen, len(bignum))
	}
}
