package envoyapi_test

import (
	"encoding/json"
	"reflect"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
)

func dynamicMetadata(c *daemon.Config) { c.ResponseDynamicMetadata = true }

func overdraftByDefault(c *daemon.Config) { c.OverdraftByDefault = true }

// wantMetadata compares r's dynamic_metadata, as JSON, with want.
func wantMetadata(t *testing.T, step string, r *rlsv3.RateLimitResponse, want string) {
	t.Helper()
	got, err := protojson.Marshal(r.GetDynamicMetadata())
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: the test's JSON: %v", step, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: dynamic_metadata\n%s\nwant\n%s", step, got, want)
	}
}

// TestDynamicMetadata plays docs/envoy.md's worked example over gRPC: an
// AI Gateway route over two backends, as Envoy asks about it on the
// request path and charges it when the stream is done, in Envoy Gateway's
// environment (overdraft by default). dynamic_metadata carries upstream's
// fields (domain, descriptors with entries, hitsAddend, the merged
// metadata of those that passed) and each descriptor's answer, and the
// quota scopes with room in order: the backup only, once the first
// backend's model is spent.
func TestDynamicMetadata(t *testing.T) {
	h := start(t, "testdata/aigateway.yaml", dynamicMetadata, overdraftByDefault)
	const (
		premium = "rule-0-x-tenant-id|premium-match-0"
		dflt    = "rule-1-match--1"
		domain  = "ai-gateway-quota"
	)
	openai := func(rule string) []string {
		return []string{"backend_name", "default/openai", "model_name_override", "gpt-4", rule, rule}
	}
	backup := []string{"backend_name", "default/backup", "model_name_override", "gpt-4o"}

	r := h.call(t, req(domain, desc(openai(premium)...), desc(openai(dflt)...), desc(backup...)))
	if r.OverallCode != okCode {
		t.Fatalf("first request: %v", r.OverallCode)
	}
	wantMetadata(t, "the first request", r, `{
	  "domain": "ai-gateway-quota",
	  "descriptors": [
	    {"entries": ["backend_name=default/openai", "model_name_override=gpt-4", "rule-0-x-tenant-id|premium-match-0=rule-0-x-tenant-id|premium-match-0"],
	     "code": "OK", "rule": "ai-gateway-quota.backend_name_default/openai.model_name_override_gpt-4.rule-0-x-tenant-id|premium-match-0_rule-0-x-tenant-id|premium-match-0",
	     "limitRemaining": 4999, "currentLimit": {"requestsPerUnit": 5000, "unit": "HOUR"}},
	    {"entries": ["backend_name=default/openai", "model_name_override=gpt-4", "rule-1-match--1=rule-1-match--1"],
	     "code": "OK", "rule": "ai-gateway-quota.backend_name_default/openai.model_name_override_gpt-4.rule-1-match--1_rule-1-match--1",
	     "limitRemaining": 999, "currentLimit": {"requestsPerUnit": 1000, "unit": "HOUR"}},
	    {"entries": ["backend_name=default/backup", "model_name_override=gpt-4o"],
	     "code": "OK", "rule": "ai-gateway-quota.backend_name_default/backup.model_name_override_gpt-4o",
	     "limitRemaining": 999, "currentLimit": {"requestsPerUnit": 1000, "unit": "HOUR"}}
	  ],
	  "metadata": {"route": {"cluster": "openai", "tier": "premium"}},
	  "quotaGroups": [
	    {"entries": ["backend_name=default/openai", "model_name_override=gpt-4"], "metadata": {"route": {"cluster": "openai", "tier": "premium"}}},
	    {"entries": ["backend_name=default/backup", "model_name_override=gpt-4o"], "metadata": {"route": {"cluster": "backup"}}}
	  ]
	}`)

	// The stream is done: 1200 tokens, on the premium bucket and the
	// default one; the default bucket goes into debt.
	done := req(domain, desc(openai(premium)...), desc(openai(dflt)...))
	done.HitsAddend = 1200
	r = h.call(t, done)
	wantMetadata(t, "the stream-done charge", r, `{
	  "domain": "ai-gateway-quota",
	  "hitsAddend": 1200,
	  "descriptors": [
	    {"entries": ["backend_name=default/openai", "model_name_override=gpt-4", "rule-0-x-tenant-id|premium-match-0=rule-0-x-tenant-id|premium-match-0"],
	     "code": "OK", "rule": "ai-gateway-quota.backend_name_default/openai.model_name_override_gpt-4.rule-0-x-tenant-id|premium-match-0_rule-0-x-tenant-id|premium-match-0",
	     "limitRemaining": 3799, "currentLimit": {"requestsPerUnit": 5000, "unit": "HOUR"}},
	    {"entries": ["backend_name=default/openai", "model_name_override=gpt-4", "rule-1-match--1=rule-1-match--1"],
	     "code": "OVER_LIMIT", "rule": "ai-gateway-quota.backend_name_default/openai.model_name_override_gpt-4.rule-1-match--1_rule-1-match--1",
	     "limitRemaining": 0, "currentLimit": {"requestsPerUnit": 1000, "unit": "HOUR"}}
	  ],
	  "metadata": {"route": {"cluster": "openai", "tier": "premium"}},
	  "quotaGroups": [
	    {"entries": ["backend_name=default/openai", "model_name_override=gpt-4"], "metadata": {"route": {"cluster": "openai", "tier": "premium"}}}
	  ]
	}`)

	// Another tenant: only the default bucket is its on default/openai,
	// and it is spent; the route's backup has room: OK, and quotaGroups
	// names the backup alone.
	r = h.call(t, req(domain, desc(openai(dflt)...), desc(backup...)))
	if r.OverallCode != okCode {
		t.Fatalf("another tenant with a backup: %v", r.OverallCode)
	}
	wantMetadata(t, "another tenant", r, `{
	  "domain": "ai-gateway-quota",
	  "descriptors": [
	    {"entries": ["backend_name=default/openai", "model_name_override=gpt-4", "rule-1-match--1=rule-1-match--1"],
	     "code": "OVER_LIMIT", "rule": "ai-gateway-quota.backend_name_default/openai.model_name_override_gpt-4.rule-1-match--1_rule-1-match--1",
	     "limitRemaining": 0, "currentLimit": {"requestsPerUnit": 1000, "unit": "HOUR"}},
	    {"entries": ["backend_name=default/backup", "model_name_override=gpt-4o"],
	     "code": "OK", "rule": "ai-gateway-quota.backend_name_default/backup.model_name_override_gpt-4o",
	     "limitRemaining": 998, "currentLimit": {"requestsPerUnit": 1000, "unit": "HOUR"}}
	  ],
	  "metadata": {"route": {"cluster": "backup"}},
	  "quotaGroups": [
	    {"entries": ["backend_name=default/backup", "model_name_override=gpt-4o"], "metadata": {"route": {"cluster": "backup"}}}
	  ]
	}`)

	// Off by default: no dynamic_metadata.
	off := start(t, "testdata/aigateway.yaml")
	if r := off.call(t, req(domain, desc(backup...))); r.GetDynamicMetadata() != nil {
		t.Errorf("without --response-dynamic-metadata: %v", r.GetDynamicMetadata())
	}
}
