package xdspolicy_test

import (
	"fmt"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
)

// chain returns a resource of one chain of descriptors depth deep.
func chain(domain string, depth int) *rlsconfv3.RateLimitConfig {
	d := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
	for range depth - 1 {
		d = &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
}

// TestBoundsBeforeDecoding: a response beyond the policy's bounds — its
// bytes, its resources, its descriptors (all resources together), their
// depth — is
// NACKed with the bound named, and the policy in force stays; one within
// them is applied.
func TestBoundsBeforeDecoding(t *testing.T) {
	var many []*rlsconfv3.RateLimitConfig // a domain each, no descriptor
	for i := range 71 {
		name := fmt.Sprintf("d%d", i)
		many = append(many, &rlsconfv3.RateLimitConfig{Name: name, Domain: name})
	}
	big := domainConfig("big", 1)
	big.Descriptors[0].Key = strings.Repeat("k", 4000)
	for _, tc := range []struct {
		name    string
		configs []*rlsconfv3.RateLimitConfig
		want    string
	}{
		{"bytes", []*rlsconfv3.RateLimitConfig{big}, "bytes together, more than the limit of 4000 (--max-policy-bytes); not decoded"},
		{"descriptors", []*rlsconfv3.RateLimitConfig{chain("a", 40), chain("b", 31)}, "resources[1]: more than 70 descriptors (--max-policy-descriptors, the resources together); not decoded"},
		{"resources", many, "resources: 71, more than the limit of 70 (--max-policy-descriptors, a resource counted as one); not decoded"},
		// The control plane's cache orders resources as it likes: the deep
		// one is resources[0] or resources[1].
		{"depth", []*rlsconfv3.RateLimitConfig{chain("a", 3), chain("b", config.MaxDepth+1)}, "]: descriptors[0]: descriptors nested more than 64 deep below it (the most a policy nests); not decoded"},
		{"within", []*rlsconfv3.RateLimitConfig{chain("a", 40), chain("b", 30)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := xdstest.Start(t, nil)
			srv.Set(node, "v1", domainConfig("shop", 10))
			f := newInForce()
			run(t, xdspolicy.Config{Server: srv.Addr(), Bounds: config.PolicyBounds{MaxBytes: 4000, MaxDescriptors: 70}}, f.apply)
			srv.WaitRequest(xdstest.IsACK("v1"))
			srv.Set(node, "v2", tc.configs...)
			if tc.want == "" {
				srv.WaitRequest(xdstest.IsACK("v2"))
				return
			}
			nack := srv.WaitRequest(xdstest.IsNACK)
			if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, tc.want) || nack.GetVersionInfo() != "v1" {
				t.Errorf("NACK %q in force %q, want %q and v1 in force", msg, nack.GetVersionInfo(), tc.want)
			}
			if got := f.requests("shop"); got != 10 {
				t.Errorf("shop allows %d, want 10 (v1 in force)", got)
			}
		})
	}
}
