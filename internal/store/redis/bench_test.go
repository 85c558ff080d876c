package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// BenchmarkApply compares the memory store with Redis (on Redis TIME, as
// in production; and "redis counters", with Config.Counters: its fixed
// windows kept as envoyproxy/ratelimit's counters, on the daemon's clock)
// on requests of one fixed-window charge, one token-bucket
// charge, one token-bucket check (algorithms.Check: it must cost no more than
// a charge), one concurrency charge (65535 in flight, a lease of 10m as in
// docs/envoy.md's recipe: it must cost no more than a token-bucket charge),
// three charges (fixed window, sliding window, token bucket),
// and three charges of which two are quotas (store.Charge.Quota), one of
// them spent (one per hour, spent by the first request on its key), each
// on one of 1024 keys per descriptor, from benchCallers
// parallel callers. The limits are ordinary ones that the traffic never exhausts. For Redis it
// reports:
//
//	redis-cpu-µs/req  Redis's CPU time (INFO CPU, user + system) per
//	                  request: the script, the commands and the network I/O
//	roundtrips/req    round trips per request (at most 1)
//	req/s             requests per second
func BenchmarkApply(b *testing.B) {
	srv := redistest.Start(b)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	fixed := mustLimit(b, algorithms.FixedWindow, 1_000_000, time.Minute, 0)
	sliding := mustLimit(b, algorithms.SlidingWindow, 1_000_000, time.Second, 0)
	token := mustLimit(b, algorithms.TokenBucket, 1_000_000, time.Second, 0)
	spent := mustLimit(b, algorithms.FixedWindow, 1, time.Hour, 0)
	inFlight := mustLimit(b, algorithms.Concurrency, algorithms.MaxInFlight, 10*time.Minute, 0)
	cases := []struct {
		name   string
		limits []*algorithms.Limit
		kind   algorithms.Kind
		quotas []uint32
	}{
		{"fixed", []*algorithms.Limit{fixed}, algorithms.Admit, nil},
		{"token", []*algorithms.Limit{token}, algorithms.Admit, nil},
		{"token check", []*algorithms.Limit{token}, algorithms.Check, nil},
		{"concurrency", []*algorithms.Limit{inFlight}, algorithms.Admit, nil},
		{"3 charges", []*algorithms.Limit{fixed, sliding, token}, algorithms.Admit, nil},
		{"2 quotas, one spent", []*algorithms.Limit{fixed, spent, token}, algorithms.Admit, []uint32{1, 2, 0}},
	}
	for _, tc := range cases {
		stores := []struct {
			name string
			s    store.Store
		}{
			{"memory", memory.New(clock.NewMonotonic())},
			{"redis", newBenchStore(b, srv.Addr(), false)},
			{"redis counters", newBenchStore(b, srv.Addr(), true)},
		}
		for _, st := range stores {
			b.Run(st.name+"/"+tc.name, func(b *testing.B) {
				rs, _ := st.s.(*testStore)
				var trips0, applies0 uint64
				var cpu0 float64
				if rs != nil {
					trips0, applies0 = rs.RoundTrips(), rs.Applies()
					cpu0 = redisCPU(b, admin)
				}
				start := time.Now()
				b.SetParallelism(parallelism())
				b.RunParallel(func(pb *testing.PB) {
					n := len(tc.limits)
					charges := make([]store.Charge, n)
					d := make([]algorithms.Decision, n)
					i := 0
					for pb.Next() {
						for j := range charges {
							charges[j] = store.Charge{Domain: "bench", Key: engineKey("bench", fmt.Sprint(j), fmt.Sprint(i%1024)), Limit: tc.limits[j], Cost: 1, Kind: tc.kind}
							if tc.quotas != nil {
								charges[j].Quota = tc.quotas[j]
							}
							if st.name == "redis counters" {
								charges[j].Counter = fmt.Appendf(nil, "bench_%d_%d_", j, i%1024)
							}
						}
						if err := st.s.Apply(context.Background(), charges, d); err != nil {
							b.Error(err)
							return
						}
						if d[0].Code != algorithms.Allowed {
							b.Errorf("denied: %+v", d[0])
							return
						}
						i++
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
				if rs != nil {
					trips, applies := rs.RoundTrips()-trips0, rs.Applies()-applies0
					b.ReportMetric(float64(trips)/float64(applies), "roundtrips/req")
					b.ReportMetric((redisCPU(b, admin)-cpu0)*1e6/float64(applies), "redis-cpu-µs/req")
					if trips > applies {
						b.Errorf("%d round trips for %d requests, want at most one each", trips, applies)
					}
				}
			})
		}
	}
}

// BenchmarkSettleScript measures settle.lua alone, without the store's
// batching: Redis's CPU per request for one script call after another,
// each settling a batch of one-charge requests (1; 18, what gathers
// through a daemon that shares the machine's two cores with Redis and the
// load tool; 37, what gathers in BenchmarkApply) on 10,000 keys, on a
// fixed window of a million per minute, a token bucket of a million per
// second and a concurrency of 65535 in flight with a lease of 10m (never
// exhausted). It reports:
//
//	redis-cpu-µs/req  Redis's CPU time (INFO CPU, user + system) per
//	                  request: the script, its commands and the calls'
//	                  network I/O
func BenchmarkSettleScript(b *testing.B) {
	srv := redistest.Start(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	for _, l := range []*algorithms.Limit{
		mustLimit(b, algorithms.FixedWindow, 1_000_000, time.Minute, 0),
		mustLimit(b, algorithms.TokenBucket, 1_000_000, time.Second, 0),
		mustLimit(b, algorithms.Concurrency, algorithms.MaxInFlight, 10*time.Minute, 0),
	} {
		for _, batch := range []int{1, 18, 37} {
			b.Run(fmt.Sprintf("%v/batch=%d", l.Algorithm(), batch), func(b *testing.B) {
				ctx := context.Background()
				keys := make([]string, batch)
				charges := make([]store.Charge, batch)
				for i := range charges {
					charges[i] = store.Charge{Domain: "bench", Limit: l, Cost: 1}
				}
				n := 0
				cpu0 := redisCPU(b, c)
				for range b.N {
					for i := range keys {
						n++
						keys[i] = fmt.Sprintf("script:{bench}%v:%d", l.Algorithm(), n%10000)
					}
					if err := redis.SettleBatch(ctx, c, keys, charges); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((redisCPU(b, c)-cpu0)*1e6/float64(b.N*batch), "redis-cpu-µs/req")
			})
		}
	}
}

// BenchmarkIncrbyExpire is a reference for BenchmarkApply's Redis CPU per
// request, measured in the same conditions: the commands that
// envoyproxy/ratelimit sends per fixed-window descriptor, INCRBY and
// EXPIRE, pipelined together, from benchCallers parallel callers on 1024
// keys.
func BenchmarkIncrbyExpire(b *testing.B) {
	srv := redistest.Start(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	cpu0 := redisCPU(b, c)
	start := time.Now()
	b.SetParallelism(parallelism())
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := 0
		for pb.Next() {
			key := fmt.Sprintf("bench_%d_%d", i%1024, time.Now().Unix()/60)
			pipe := c.Pipeline()
			pipe.IncrBy(ctx, key, 1)
			pipe.Expire(ctx, key, time.Minute)
			if _, err := pipe.Exec(ctx); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	b.ReportMetric((redisCPU(b, c)-cpu0)*1e6/float64(b.N), "redis-cpu-µs/req")
}

// benchCallers is how many callers the benchmarks run at once: the 64 of
// the load the Redis store was first measured under (64 callers over two
// connections), whose requests share round trips.
const benchCallers = 64

// parallelism is b.SetParallelism's argument for benchCallers goroutines.
func parallelism() int {
	return max(1, benchCallers/runtime.GOMAXPROCS(0))
}

// redisCPU returns the CPU seconds Redis has used (INFO CPU: used_cpu_sys
// + used_cpu_user).
func redisCPU(b *testing.B, admin *goredis.Client) float64 {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += x
		}
	}
	return sum
}

// newBenchStore returns a Redis store in its guard, as the daemon runs it.
func newBenchStore(b *testing.B, addr string, counters bool) *testStore {
	s := newTestStore(b, redis.Config{Addr: addr, KeyPrefix: "bench:", Timeout: 5 * time.Second, Counters: counters}, nil)
	// Load the script, so that no request pays the EVAL fallback.
	apply(b, s, store.Charge{Domain: "bench", Key: engineKey("bench"), Limit: mustLimit(b, algorithms.FixedWindow, 1, time.Hour, 0), Cost: 0})
	return s
}
