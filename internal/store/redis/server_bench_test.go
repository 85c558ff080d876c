package redis_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

const serverBenchPolicy = `
domain: bench
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, unit: minute, requests_per_unit: 1000000}
`

// emptyServer answers every call with an empty response: the floor that
// gRPC itself costs.
type emptyServer struct {
	rl.UnimplementedRateLimitServiceServer
}

func (emptyServer) ShouldRateLimit(context.Context, *rl.ShouldRateLimitRequest) (*rl.ShouldRateLimitResponse, error) {
	return &rl.ShouldRateLimitResponse{}, nil
}

// BenchmarkServer measures whole servers over loopback gRPC in one run:
// an empty gRPC server (the floor), ratelimitd with the memory store, and
// ratelimitd with --store redis, each called with one fixed-window
// descriptor on 10,000 keys by 64 callers over 2 connections (client,
// servers and redis-server share the machine). It reports requests per
// second, for ratelimitd the ratio to the empty server's in the same run
// (x-empty), and for Redis its CPU and round trips per request.
func BenchmarkServer(b *testing.B) {
	reqs := make([]*rl.ShouldRateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &rl.ShouldRateLimitRequest{Domain: "bench", Descriptors: []*rl.Descriptor{{
			Entries: []*rl.Entry{{Key: "user", Value: fmt.Sprintf("user-%05d", i)}},
		}}}
	}
	var empty float64 // the empty server's requests per second
	run := func(b *testing.B, addr string) float64 {
		var clients [2]rl.RateLimitServiceClient
		for i := range clients {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { conn.Close() })
			clients[i] = rl.NewRateLimitServiceClient(conn)
		}
		b.SetParallelism(32) // 64 callers on 2 cores
		b.ResetTimer()
		start := time.Now()
		var callers atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			n := int(callers.Add(1))
			c := clients[n%2]
			i := n * 997
			for pb.Next() {
				r, err := c.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
				if err != nil {
					b.Error(err)
					return
				}
				if addr != "" && r.OverallCode == rl.Code_CODE_OVER_LIMIT {
					b.Error("over the limit")
					return
				}
				i++
			}
		})
		rps := float64(b.N) / time.Since(start).Seconds()
		b.ReportMetric(rps, "req/s")
		return rps
	}
	b.Run("empty-server", func(b *testing.B) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		g := grpc.NewServer()
		rl.RegisterRateLimitServiceServer(g, emptyServer{})
		go g.Serve(lis)
		defer g.Stop()
		empty = run(b, lis.Addr().String())
	})
	b.Run("memory", func(b *testing.B) {
		d := daemontest.Start(b, serverBenchPolicy)
		rps := run(b, d.GRPCAddr())
		if empty > 0 {
			b.ReportMetric(rps/empty, "x-empty")
		}
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer admin.Close()
		d := daemontest.Start(b, serverBenchPolicy, func(c *daemon.Config) {
			c.Store = "redis"
			c.Redis = redis.Config{Addr: srv.Addr(), Timeout: 5 * time.Second}
		})
		trips0, applies0 := scrape(b, d, "ratelimitd_redis_round_trips_total"), scrape(b, d, "ratelimitd_redis_requests_total")
		cpu0 := redisCPU(b, admin)
		rps := run(b, d.GRPCAddr())
		if empty > 0 {
			b.ReportMetric(rps/empty, "x-empty")
		}
		trips := scrape(b, d, "ratelimitd_redis_round_trips_total") - trips0
		applies := scrape(b, d, "ratelimitd_redis_requests_total") - applies0
		b.ReportMetric(trips/applies, "roundtrips/req")
		b.ReportMetric((redisCPU(b, admin)-cpu0)*1e6/applies, "redis-cpu-µs/req")
	})
}

// scrape returns the value of the unlabeled metric name on d's /metrics.
func scrape(b *testing.B, d *daemontest.Daemon, name string) float64 {
	resp, err := http.Get("http://" + d.HTTPAddr() + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return x
		}
	}
	b.Fatalf("no %s on /metrics", name)
	return 0
}
