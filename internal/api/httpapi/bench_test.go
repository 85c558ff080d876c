package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcapi"
	"github.com/ratelimitd/ratelimitd/internal/api/httpapi"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// emptyServer answers every call with an empty response: the floor that
// HTTP and JSON cost on this machine.
type emptyServer struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
}

func (emptyServer) ShouldRateLimit(context.Context, *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	return &ratelimitv1.ShouldRateLimitResponse{}, nil
}

func callLoop(b *testing.B, register func(*httpapi.Server)) {
	mux := http.NewServeMux()
	register(httpapi.New(mux))
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	bodies := make([][]byte, 4096)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"domain":"default","descriptors":[{"entries":[{"key":"path","value":"/orders"},{"key":"user","value":"user-%04d"}]}]}`, i)
	}
	url := srv.URL + v1Path
	b.ReportAllocs()
	b.SetParallelism(16) // enough calls in flight to keep both sides' CPUs busy
	cpu0 := processCPU(b)
	b.ResetTimer()
	defer func() {
		b.StopTimer()
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	}()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			resp, err := client.Post(url, jsonType, bytes.NewReader(bodies[i%len(bodies)]))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("HTTP %d", resp.StatusCode)
				return
			}
			i += 7
		}
	})
}

// processCPU returns the CPU time this process has used, user and system,
// in nanoseconds: unlike ns/op, it does not count the time other processes
// on a shared machine take.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkLoopback compares one ratelimit.v1 decision over real loopback
// HTTP/1.1 with JSON against a server that answers the same path with an
// empty response. Client and server share the process and enough calls are
// in flight to keep every core busy, so ns/op is the CPU a whole round trip
// costs, and cpu-ns/op the CPU this process (both sides) used per call;
// compare with internal/api/grpcapi's BenchmarkLoopback for gRPC.
func BenchmarkLoopback(b *testing.B) {
	b.Run("empty-server", func(b *testing.B) {
		callLoop(b, func(s *httpapi.Server) { ratelimitv1.RegisterRateLimitServiceServer(s, emptyServer{}) })
	})
	b.Run("ratelimitd", func(b *testing.B) {
		e := engine.New(config.Default(), memory.New(clock.NewMonotonic()))
		callLoop(b, func(s *httpapi.Server) { grpcapi.Register(s, e) })
	})
}
