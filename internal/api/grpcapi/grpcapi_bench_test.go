package grpcapi

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// emptyServer answers every call with an empty response: the floor that
// gRPC itself costs on this machine.
type emptyServer struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
}

func (emptyServer) ShouldRateLimit(context.Context, *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	return &ratelimitv1.ShouldRateLimitResponse{}, nil
}

func serve(b *testing.B, register func(*grpc.Server)) ratelimitv1.RateLimitServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go g.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		g.Stop()
	})
	return ratelimitv1.NewRateLimitServiceClient(conn)
}

// userRequests are the default policy's per-user requests for n users.
func userRequests(n int) []*ratelimitv1.ShouldRateLimitRequest {
	reqs := make([]*ratelimitv1.ShouldRateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &ratelimitv1.ShouldRateLimitRequest{Domain: "default", Descriptors: []*ratelimitv1.Descriptor{{
			Entries: []*ratelimitv1.Entry{{Key: "path", Value: "/orders"}, {Key: "user", Value: fmt.Sprintf("user-%04d", i)}},
		}}}
	}
	return reqs
}

func callLoop(b *testing.B, c ratelimitv1.RateLimitServiceClient) {
	reqs := userRequests(4096)
	b.ReportAllocs()
	b.SetParallelism(16) // enough calls in flight to keep both sides' CPUs busy
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := c.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i += 7
		}
	})
}

// BenchmarkLoopback compares one ShouldRateLimit over a real loopback gRPC
// connection against a server that does nothing with the same messages.
// Client and server share the process and enough calls are in flight to
// keep every core busy, so ns/op is the CPU a whole round trip costs on
// this machine; the difference between the two is what deciding costs on
// top of the transport.
func BenchmarkLoopback(b *testing.B) {
	b.Run("empty-server", func(b *testing.B) {
		callLoop(b, serve(b, func(g *grpc.Server) {
			ratelimitv1.RegisterRateLimitServiceServer(g, emptyServer{})
		}))
	})
	b.Run("ratelimitd", func(b *testing.B) {
		e := engine.New(config.Default(), memory.New(clock.NewMonotonic()))
		callLoop(b, serve(b, func(g *grpc.Server) { Register(g, e) }))
	})
}
