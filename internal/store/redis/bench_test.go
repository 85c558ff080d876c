package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// BenchmarkApply compares the memory store with Redis (on Redis TIME, as
// in production) on requests of 1 and 3 charges, each on one of 1024 keys
// per descriptor, from 16 parallel callers. It reports requests per second
// and, for Redis, round trips per request (which must be 1).
func BenchmarkApply(b *testing.B) {
	srv := redistest.Start(b)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	for _, n := range []int{1, 3} {
		limits := []*algorithms.Limit{
			mustLimit(b, algorithms.TokenBucket, 1_000_000_000, time.Hour, 0),
			mustLimit(b, algorithms.SlidingWindow, 1_000_000_000, time.Minute, 0),
			mustLimit(b, algorithms.FixedWindow, 1_000_000_000, time.Hour, 0),
		}
		stores := []struct {
			name string
			s    store.Store
		}{
			{"memory", memory.New(clock.NewMonotonic())},
			{"redis", newBenchStore(b, srv.Addr())},
		}
		for _, st := range stores {
			b.Run(fmt.Sprintf("%s/%d charges", st.name, n), func(b *testing.B) {
				rs, _ := st.s.(*redis.Store)
				var trips0, applies0 uint64
				if rs != nil {
					trips0, applies0 = rs.RoundTrips(), rs.Applies()
					admin.ConfigResetStat(context.Background())
				}
				start := time.Now()
				b.SetParallelism(8) // 16 callers on 2 cores: Redis's latency overlaps
				b.RunParallel(func(pb *testing.PB) {
					charges := make([]store.Charge, n)
					d := make([]algorithms.Decision, n)
					i := 0
					for pb.Next() {
						for j := range charges {
							charges[j] = store.Charge{Domain: "bench", Key: engineKey("bench", fmt.Sprint(j), fmt.Sprint(i%1024)), Limit: limits[j], Cost: 1}
						}
						if err := st.s.Apply(context.Background(), charges, d); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
				if rs != nil {
					trips, applies := rs.RoundTrips()-trips0, rs.Applies()-applies0
					b.ReportMetric(float64(trips)/float64(applies), "roundtrips/req")
					b.ReportMetric(scriptMicros(b, admin), "redis-µs/req")
					if trips != applies {
						b.Errorf("%d round trips for %d requests, want one each", trips, applies)
					}
				}
			})
		}
	}
}

// scriptMicros returns the microseconds Redis spent per EVALSHA since the
// last CONFIG RESETSTAT: the script's own cost, without the network.
func scriptMicros(b *testing.B, admin *goredis.Client) float64 {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(strings.TrimSpace(rest), ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					return x
				}
			}
		}
	}
	return 0
}

func newBenchStore(b *testing.B, addr string) *redis.Store {
	s, err := redis.New(redis.Config{Addr: addr, KeyPrefix: "bench:", Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	// Load the script, so that no request pays the EVAL fallback.
	apply(b, s, store.Charge{Domain: "bench", Key: engineKey("bench"), Limit: mustLimit(b, algorithms.FixedWindow, 1, time.Hour, 0), Cost: 0})
	return s
}
