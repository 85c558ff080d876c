package xdspolicy_test

import (
	"context"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// quotaConfig is issue 30's premium tenant: a quota of 40 an hour of its
// own beside the shared default quota of 10 an hour, both quota_mode, as
// an AI Gateway QuotaPolicy sends them.
func quotaConfig() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "ai", Domain: "ai", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "backend", Value: "openai", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "tenant", Value: "premium", QuotaMode: true,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 40},
		}, {
			Key: "default", QuotaMode: true,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 10},
		}},
	}}}
}

const quotaYAML = `
domain: ai
descriptors:
  - key: backend
    value: openai
    descriptors:
      - key: tenant
        value: premium
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 40}
      - key: default
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 10}
`

// decisions answers n requests of the premium tenant (its own quota and
// the shared one) under p, at one instant.
func decisions(t *testing.T, p *config.Policy, n int) []algorithms.Code {
	t.Helper()
	e := engine.New(p, memory.New(clock.NewFake(1e18)))
	req := &engine.Request{Domain: "ai", Descriptors: []engine.Descriptor{
		{Entries: []config.Entry{{Key: "backend", Value: "openai"}, {Key: "tenant", Value: "premium"}}},
		{Entries: []config.Entry{{Key: "backend", Value: "openai"}, {Key: "default", Value: "any"}}},
	}}
	codes := make([]algorithms.Code, n)
	for i := range codes {
		var resp engine.Response
		if err := e.ShouldRateLimit(context.Background(), req, &resp); err != nil {
			t.Fatal(err)
		}
		codes[i] = resp.Code
	}
	return codes
}

// TestQuotaModeOverXDS: the premium tenant's quota_mode, sent by a real
// xDS server, is decided as the same policy from a file decides it: once
// the shared default quota is spent, the premium tenant's own quota, with
// room, lets its requests through.
func TestQuotaModeOverXDS(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(node, "v1", quotaConfig())
	f := newInForce()
	run(t, xdspolicy.Config{Server: srv.Addr()}, f.apply)
	srv.WaitRequest(xdstest.IsACK("v1"))
	f.mu.Lock()
	fromXDS := f.policy
	f.mu.Unlock()
	fromFile, err := config.Parse("quota.yaml", []byte(quotaYAML))
	if err != nil {
		t.Fatal(err)
	}
	got, want := decisions(t, fromXDS, 15), decisions(t, fromFile, 15)
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("request %d: %v over xDS, %v from the file", i+1, got[i], want[i])
		}
	}
	if got[10] != algorithms.Allowed {
		t.Errorf("request 11 (the default quota spent, the premium one with room): %v, want allowed", got[10])
	}
}

// TestUnknownFieldNACKed: a resource carrying a field the daemon does not
// know is NACKed with the field's place named, and the policy in force
// stays.
func TestUnknownFieldNACKed(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(node, "v1", quotaConfig())
	f := newInForce()
	run(t, xdspolicy.Config{Server: srv.Addr()}, f.apply)
	srv.WaitRequest(xdstest.IsACK("v1"))

	newer := quotaConfig()
	b := protowire.AppendTag(nil, 9, protowire.BytesType) // a descriptor field of a newer module
	b = protowire.AppendString(b, "group-a")
	newer.Descriptors[0].Descriptors[1].ProtoReflect().SetUnknown(b)
	srv.Set(node, "v2", newer)
	nack := srv.WaitRequest(xdstest.IsNACK)
	msg := nack.GetErrorDetail().GetMessage()
	if nack.GetVersionInfo() != "v1" || !strings.Contains(msg, "xds:ai: descriptors[0].descriptors[1]: unknown field number 9") {
		t.Errorf("NACK of version %q: %q; want v1 in force and the field named", nack.GetVersionInfo(), msg)
	}
}
