package xdspolicy_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig/tlstest"
)

const node = "envoy-ratelimit"

func domainConfig(domain string, requests uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: requests, Name: "per_user"},
	}}}
}

// inForce is an Apply that builds the policy as the daemon does and keeps
// the last one it accepted.
type inForce struct {
	mu      sync.Mutex
	policy  *config.Policy
	version string
	changed chan struct{}
}

func newInForce() *inForce { return &inForce{changed: make(chan struct{}, 100)} }

func (f *inForce) apply(version string, configs []config.RateLimitConfig) error {
	p, err := config.FromRateLimitConfigs(configs, config.DefaultPolicyBounds)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.policy, f.version = p, version
	f.mu.Unlock()
	f.changed <- struct{}{}
	return nil
}

func (f *inForce) requests(domain string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.policy == nil || f.policy.Domain(domain) == nil {
		return -1
	}
	return f.policy.Domain(domain).Match([]config.Entry{{Key: "user", Value: "a"}}).Limits[0].Rate.Requests()
}

func run(t *testing.T, cfg xdspolicy.Config, apply xdspolicy.Apply) *xdspolicy.Client {
	t.Helper()
	cfg.NodeID = node
	cfg.InitialBackoff, cfg.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil))
	c, err := xdspolicy.New(cfg, apply)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func TestLoadUpdateNACKAndReconnect(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(node, "v1", domainConfig("shop", 10))
	f := newInForce()
	c := run(t, xdspolicy.Config{Server: srv.Addr(), Headers: map[string]string{"x-tenant": "blue"}}, f.apply)

	// Initial load, ACKed, on a stream with the headers asked for.
	srv.WaitRequest(xdstest.IsACK("v1"))
	if h := srv.Headers().Get("x-tenant"); len(h) != 1 || h[0] != "blue" {
		t.Errorf("stream metadata x-tenant %q, want blue", h)
	}
	if got := f.requests("shop"); got != 10 {
		t.Fatalf("shop allows %d a minute, want 10", got)
	}
	if s := c.Status(); s.Version != "v1" || !s.Connected || s.Applied != 1 {
		t.Errorf("status %+v, want v1, connected, 1 applied", s)
	}

	// An update: a second domain and a new limit.
	srv.Set(node, "v2", domainConfig("shop", 20), domainConfig("bank", 5))
	srv.WaitRequest(xdstest.IsACK("v2"))
	if a, b := f.requests("shop"), f.requests("bank"); a != 20 || b != 5 {
		t.Fatalf("shop %d, bank %d, want 20 and 5", a, b)
	}

	// A bad update: NACKed with the reason, the last good version named,
	// the policy in force unchanged.
	bad := domainConfig("shop", 30)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set(node, "v3", bad)
	nack := srv.WaitRequest(xdstest.IsNACK)
	if nack.GetVersionInfo() != "v2" || !strings.Contains(nack.GetErrorDetail().GetMessage(), "descriptors[0].rate_limit.unit: missing") {
		t.Errorf("NACK version %q detail %q, want v2 and the unit problem", nack.GetVersionInfo(), nack.GetErrorDetail().GetMessage())
	}
	if got := f.requests("shop"); got != 20 {
		t.Errorf("after the NACK shop allows %d, want 20 (v2 still in force)", got)
	}
	// go-control-plane sends v3 again after the NACK (its version is not
	// the client's): refused again, after a wait, without being applied
	// or counted again.
	nacks := 0
	srv.WaitRequest(func(r *discoveryv3.DiscoveryRequest) bool {
		if xdstest.IsNACK(r) {
			nacks++
		}
		return nacks == 2
	})
	if s := c.Status(); s.Version != "v2" || s.Refused != 1 || s.LastNACKVersion != "v3" || !strings.Contains(s.LastNACK, "unit") {
		t.Errorf("status %+v, want v2 in force and the v3 NACK", s)
	}

	// The server restarts: the client connects again, asks with the
	// version in force, and takes the next update.
	before := len(srv.Requests())
	srv.Restart()
	first := srv.WaitRequest(func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() == "" && len(srv.Requests()) > before
	})
	if first.GetVersionInfo() != "v2" || first.GetNode().GetId() != node || first.GetTypeUrl() != xdspolicy.TypeURL {
		t.Errorf("first request after the restart: version %q node %q type %q", first.GetVersionInfo(), first.GetNode().GetId(), first.GetTypeUrl())
	}
	srv.Set(node, "v4", domainConfig("shop", 40))
	srv.WaitRequest(xdstest.IsACK("v4"))
	if got := f.requests("shop"); got != 40 {
		t.Errorf("after the restart shop allows %d, want 40", got)
	}
	if s := c.Status(); s.LastNACK != "" {
		t.Errorf("last NACK %q after an applied update, want none", s.LastNACK)
	}
}

func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "xds-ca")
	dir := t.TempDir()
	srvPair := ca.Server(t, "envoy-gateway", time.Now().Add(time.Hour))
	cert, err := tls.X509KeyPair(srvPair.Cert, srvPair.Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := xdstest.Start(t, &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	srv.Set(node, "v1", domainConfig("shop", 10))
	caFile := dir + "/ca.crt"
	tlstest.WriteFile(t, caFile, ca.PEM)

	t.Run("without a client certificate the server refuses", func(t *testing.T) {
		creds, err := xdspolicy.ClientTLS(caFile, "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		c := run(t, xdspolicy.Config{Server: srv.Addr(), TLS: creds}, newInForce().apply)
		wait.For(t, "a connection error in the status", func() bool { return c.Status().LastError != "" })
		if s := c.Status(); s.Version != "" || s.LastError == "" {
			t.Errorf("status %+v, want no version and a connection error", s)
		}
	})
	t.Run("with one it subscribes", func(t *testing.T) {
		certFile, keyFile := ca.Client(t, "ratelimit").Write(t, dir, "client")
		creds, err := xdspolicy.ClientTLS(caFile, certFile, keyFile, "")
		if err != nil {
			t.Fatal(err)
		}
		f := newInForce()
		run(t, xdspolicy.Config{Server: srv.Addr(), TLS: creds}, f.apply)
		select {
		case <-f.changed:
		case <-time.After(10 * time.Second):
			t.Fatal("no policy over mutual TLS within 10s")
		}
		if got := f.requests("shop"); got != 10 {
			t.Errorf("shop allows %d, want 10", got)
		}
	})
}

func TestClientTLSErrors(t *testing.T) {
	dir := t.TempDir()
	tlstest.WriteFile(t, dir+"/junk", []byte("not PEM"))
	for _, tc := range []struct{ ca, cert, key, want string }{
		{ca: dir + "/missing", want: "xds server CA"},
		{ca: dir + "/junk", want: "no PEM certificate"},
		{cert: dir + "/junk", want: "both the certificate and its key"},
		{cert: dir + "/junk", key: dir + "/junk", want: "xds client certificate"},
	} {
		if _, err := xdspolicy.ClientTLS(tc.ca, tc.cert, tc.key, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClientTLS(%q, %q, %q): %v, want %q", tc.ca, tc.cert, tc.key, err, tc.want)
		}
	}
}

// A resource wrapped in envoy.service.discovery.v3.Resource carries
// ratelimitd's extensions in its metadata; the go-control-plane snapshot
// cache does not wrap resources so, so this server is a hand-written one.
func TestWrappedResourceExtensions(t *testing.T) {
	inner, err := anypb.New(domainConfig("shop", 10))
	if err != nil {
		t.Fatal(err)
	}
	ext, err := structpb.NewStruct(map[string]any{"limits": map[string]any{"per_user": map[string]any{"algorithm": "token_bucket", "burst": 15}}})
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := anypb.New(&discoveryv3.Resource{Name: "shop", Resource: inner,
		Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{xdspolicy.ExtensionsKey: ext}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []config.RateLimitConfig
	resp := &discoveryv3.DiscoveryResponse{VersionInfo: "w1", Nonce: "n1", TypeUrl: xdspolicy.TypeURL, Resources: []*anypb.Any{wrapped}}
	req := xdspolicy.Handle(t, resp, func(_ string, c []config.RateLimitConfig) error { got = c; return nil })
	if req.GetErrorDetail() != nil || req.GetVersionInfo() != "w1" || req.GetResponseNonce() != "n1" {
		t.Fatalf("reply %v, want the ACK of w1", req)
	}
	p, err := config.FromRateLimitConfigs(got, config.DefaultPolicyBounds)
	if err != nil {
		t.Fatal(err)
	}
	rate := p.Domain("shop").Match([]config.Entry{{Key: "user", Value: "a"}}).Limits[0].Rate
	if rate.Algorithm().String() != "token_bucket" || rate.Burst() != 15 {
		t.Errorf("limit %v burst %d, want token_bucket 15", rate.Algorithm(), rate.Burst())
	}

	// A resource of another type is refused, naming it.
	other, _ := anypb.New(&discoveryv3.Resource{Name: "x"})
	resp = &discoveryv3.DiscoveryResponse{VersionInfo: "w2", Nonce: "n2", TypeUrl: xdspolicy.TypeURL, Resources: []*anypb.Any{other}}
	req = xdspolicy.Handle(t, resp, func(string, []config.RateLimitConfig) error { t.Error("applied a bad response"); return nil })
	if d := req.GetErrorDetail().GetMessage(); !strings.Contains(d, "resources[0]: type") {
		t.Errorf("NACK detail %q, want resources[0]: type ...", d)
	}
}
