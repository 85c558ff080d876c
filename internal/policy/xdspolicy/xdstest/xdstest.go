// Package xdstest runs a real xDS control plane in a test: go-control-plane's
// ADS server over its snapshot cache, serving RateLimitConfig resources, on
// 127.0.0.1, in plaintext or TLS. It records every discovery request it
// receives, so that a test can see ACKs and NACKs.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Server is a running control plane.
type Server struct {
	t     testing.TB
	cache cachev3.SnapshotCache
	xds   serverv3.Server
	creds *tls.Config
	addr  string

	mu       sync.Mutex
	grpc     *grpc.Server
	requests []*discoveryv3.DiscoveryRequest
	headers  metadata.MD   // of the last stream opened
	changed  chan struct{} // closed and replaced at every request
}

// Start starts a control plane on a free port of 127.0.0.1, serving TLS
// with creds when not nil. It stops when the test ends.
func Start(t testing.TB, creds *tls.Config) *Server {
	t.Helper()
	s := &Server{t: t, cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), creds: creds, changed: make(chan struct{})}
	s.xds = serverv3.NewServer(context.Background(), s.cache, serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.headers = md
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			s.requests = append(s.requests, r)
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			return nil
		},
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(lis net.Listener) {
	var opts []grpc.ServerOption
	if s.creds != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.creds)))
	}
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go g.Serve(lis)
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Set makes configs the state of node's RateLimitConfig resources, at
// version: streams of that node receive them.
func (s *Server) Set(node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		s.t.Fatal(err)
	}
}

// Stop stops the server, cutting its streams.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// Restart stops the server and starts it again on the same address, with
// the same snapshots.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var lis net.Listener
	var err error
	for range 100 { // the port may take a moment to be free again
		if lis, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.serve(lis)
}

// Headers returns the gRPC metadata of the last stream opened.
func (s *Server) Headers() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers.Copy()
}

// Requests returns every discovery request received so far.
func (s *Server) Requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), s.requests...)
}

// WaitRequest waits up to wait.Timeout (30 s, a bound on a hang: a daemon
// parsing the largest policy on a loaded machine can take more than 10 s)
// for a request, among those received so far or to come, that match says
// is the one, and returns it; it fails the test when none comes.
func (s *Server) WaitRequest(match func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	s.t.Helper()
	deadline := time.After(wait.Timeout)
	for seen := 0; ; {
		s.mu.Lock()
		reqs, changed := s.requests[seen:], s.changed
		seen = len(s.requests)
		s.mu.Unlock()
		for _, r := range reqs {
			if match(r) {
				return r
			}
		}
		select {
		case <-changed:
		case <-deadline:
			s.t.Fatalf("xdstest: the awaited discovery request did not come within %v", wait.Timeout)
			return nil
		}
	}
}

// IsACK matches the ACK of version.
func IsACK(version string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil && r.GetVersionInfo() == version
	}
}

// IsNACK matches a NACK.
func IsNACK(r *discoveryv3.DiscoveryRequest) bool {
	return r.GetResponseNonce() != "" && r.GetErrorDetail() != nil
}
