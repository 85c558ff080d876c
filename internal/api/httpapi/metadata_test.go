package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// TestQuotaScopesAndMetadata: on a real daemon, the quota scopes and the
// policy's metadata of a request over an AI Gateway route of two backends
// reach ratelimit.v1's callers over gRPC and over HTTP (one bucket set),
// and Envoy's /json callers in dynamic_metadata with
// --response-dynamic-metadata.
func TestQuotaScopesAndMetadata(t *testing.T) {
	d := daemontest.Start(t, "", daemontest.Path("../envoyapi/testdata/aigateway.yaml"),
		func(c *daemon.Config) { c.ResponseDynamicMetadata = true })
	base := "http://" + d.HTTPAddr()
	const v1Req = `{"domain": "ai-gateway-quota", "descriptors": [
	  {"entries": [{"key": "backend_name", "value": "default/openai"}, {"key": "model_name_override", "value": "gpt-4"},
	               {"key": "rule-1-match--1", "value": "rule-1-match--1"}]},
	  {"entries": [{"key": "backend_name", "value": "default/backup"}, {"key": "model_name_override", "value": "gpt-4o"}]}]}`
	var req ratelimitv1.ShouldRateLimitRequest
	if err := protojson.Unmarshal([]byte(v1Req), &req); err != nil {
		t.Fatal(err)
	}
	// Over gRPC: both models have room.
	r, err := ratelimitv1.NewRateLimitServiceClient(d.Dial(t)).ShouldRateLimit(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := protojson.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	// Every status decided a bucket at the daemon's T0.
	const chargedAt = `"chargedAt":"2023-11-14T22:14:00Z"`
	for _, want := range []string{
		`"metadata":{"route":{"cluster":"openai"}},"scope":1,` + chargedAt + `}`,
		`"metadata":{"route":{"cluster":"backup"}},"scope":2,` + chargedAt + `}`,
		`"quotas":{"scopes":[{"entries":[{"key":"backend_name","value":"default/openai"},{"key":"model_name_override","value":"gpt-4"}],"room":true,"metadata":{"route":{"cluster":"openai"}}},{"entries":[{"key":"backend_name","value":"default/backup"},{"key":"model_name_override","value":"gpt-4o"}],"room":true,"metadata":{"route":{"cluster":"backup"}}}]}`,
		`"metadata":{"route":{"cluster":"openai"}}}`, // the response's, merged: the first wins
	} {
		if !strings.Contains(strings.ReplaceAll(string(got), " ", ""), want) {
			t.Errorf("over gRPC:\n%s\nwant it to hold\n%s", got, want)
		}
	}
	// Over HTTP, the same buckets: 999 more spend the first model; the
	// route's backup still has room.
	spend := post(t, base+v1Path, jsonType, `{"domain": "ai-gateway-quota", "hits": 999, "descriptors": [
	  {"entries": [{"key": "backend_name", "value": "default/openai"}, {"key": "model_name_override", "value": "gpt-4"},
	               {"key": "rule-1-match--1", "value": "rule-1-match--1"}]}]}`)
	if spend.status != 200 || !strings.Contains(spend.body, `"overallCode":"CODE_OK"`) {
		t.Fatalf("spending the first model: %d %s", spend.status, spend.body)
	}
	ans := post(t, base+v1Path, jsonType, v1Req)
	for _, want := range []string{
		`"overallCode":"CODE_OK"`,
		`"quotas":{"scopes":[{"entries":[{"key":"backend_name","value":"default/openai"},{"key":"model_name_override","value":"gpt-4"}],"room":false},{"entries":[{"key":"backend_name","value":"default/backup"},{"key":"model_name_override","value":"gpt-4o"}],"room":true,"metadata":{"route":{"cluster":"backup"}}}]}`,
	} {
		if ans.status != 200 || !strings.Contains(strings.ReplaceAll(ans.body, " ", ""), want) {
			t.Errorf("over HTTP: %d %s\nwant it to hold\n%s", ans.status, ans.body, want)
		}
	}
	// Envoy's API as upstream's /json, on the spent model alone: 429, and
	// dynamic_metadata with no scope left.
	ans = post(t, base+"/json", "application/json", `{"domain": "ai-gateway-quota", "descriptors": [
	  {"entries": [{"key": "backend_name", "value": "default/openai"}, {"key": "model_name_override", "value": "gpt-4"},
	               {"key": "rule-1-match--1", "value": "rule-1-match--1"}]}]}`)
	for _, want := range []string{`"overallCode":"OVER_LIMIT"`, `"dynamicMetadata":{`, `"quotaGroups":[]`, `"domain":"ai-gateway-quota"`} {
		if ans.status != 429 || !strings.Contains(strings.ReplaceAll(ans.body, " ", ""), want) {
			t.Errorf("/json: %d %s\nwant 429 and %s", ans.status, ans.body, want)
		}
	}
}
