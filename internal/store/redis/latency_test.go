package redis_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// farAway is how far the far Redis of these tests is, each way: a round
// trip takes 200ms. farTimeout leaves 150ms beside it for a loaded CI
// machine's scheduling (the proxy's and the callers' goroutines), so that
// only a request made to wait for another's round trip, as the sender
// once did, runs out of time.
const (
	farAway    = 100 * time.Millisecond
	farTimeout = 350 * time.Millisecond
)

// newFarStore returns a store with a timeout of farTimeout and failure mode
// closed, in front of a Redis farAway each way, with the script loaded and
// the store's connections made, and a count of its health changes.
func newFarStore(t testing.TB) (*testStore, *healthLog) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	if err := redis.SettleBatch(context.Background(), admin, nil, nil); err != nil { // loads the script
		t.Fatal(err)
	}
	proxy := redistest.StartLatencyProxy(t, srv.Addr(), farAway)
	var changes healthLog
	s := newGuardedStore(t, redis.Config{Addr: proxy.Addr(), Timeout: farTimeout},
		guard.Config{FailureMode: guard.FailClosed, OnHealth: changes.add}, nil)
	return s, &changes
}

// healthLog records OnHealth's calls.
type healthLog struct {
	mu      sync.Mutex
	changes []string
}

func (h *healthLog) add(up bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, fmt.Sprintf("up=%v err=%v", up, err))
}

func (h *healthLog) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.changes)
}

// farCharge is a request of caller g: a limit that the load never
// exhausts, so that a denial can only be the failure mode's.
func farCharge(t testing.TB, g, i int) []store.Charge {
	l := mustLimit(t, algorithms.TokenBucket, 1_000_000, time.Second, 0)
	return []store.Charge{{Domain: "far", Key: engineKey("far", "caller", fmt.Sprint(g), fmt.Sprint(i%16)), Limit: l, Cost: 1}}
}

// TestFarRedis: with Redis 100ms away each way (a round trip of 200ms,
// the timeout 350ms), 16 callers sending one request after another for
// several round trips each are all answered by Redis: batches in flight
// do not hold back the next, so no request waits for another's round
// trip before its own and none times out into the failure mode, and the
// store stays healthy.
func TestFarRedis(t *testing.T) {
	s, changes := newFarStore(t)
	const callers, each = 16, 8
	var failed atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				d := make([]algorithms.Decision, 1)
				if err := s.Apply(context.Background(), farCharge(t, g, i), d); err != nil {
					t.Error(err)
					return
				}
				if d[0].Code != algorithms.Allowed {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests were decided by the failure mode with Redis answering within the timeout", n, callers*each)
	}
	if up, why := s.Healthy(); !up || changes.String() != "[]" {
		t.Errorf("health: up %v (%s), changes %s; want up throughout", up, why, changes)
	}
	if trips, applies := s.RoundTrips(), s.Applies(); trips > applies {
		t.Errorf("%d round trips for %d requests, want at most one each", trips, applies)
	}
}

// BenchmarkFarRedis measures requests to a Redis 100ms away each way, from
// 64 callers, each sending one request after another: the requests per
// second, the latency (p50, p99, max) and the requests the failure mode
// decided (a limit never exhausted: every denial is the failure mode's).
func BenchmarkFarRedis(b *testing.B) {
	s, _ := newFarStore(b)
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Int64
	var caller atomic.Int64
	start := time.Now()
	b.SetParallelism(parallelism())
	b.RunParallel(func(pb *testing.PB) {
		g := int(caller.Add(1))
		var mine []time.Duration
		d := make([]algorithms.Decision, 1)
		for i := 0; pb.Next(); i++ {
			t0 := time.Now()
			if err := s.Apply(context.Background(), farCharge(b, g, i), d); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
			if d[0].Code != algorithms.Allowed {
				failed.Add(1)
			}
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
	}
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failure-mode/req")
	b.ReportMetric(float64(s.RoundTrips())/float64(s.Applies()), "roundtrips/req")
}
