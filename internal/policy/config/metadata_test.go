package config

import (
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

const metadataPolicy = `
domain: ai
descriptors:
  - key: backend_name
    value: default/openai
    descriptors:
      - key: model_name_override
        value: gpt-4
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 100}
        metadata:
          route: {cluster: openai, weight: 2.5}
          tags: [premium, "1", 3, true, null]
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata: {}
`

// TestMetadata: a descriptor's metadata: is its rule's Metadata, every
// JSON type kept; an empty mapping is none; over xDS, the descriptor's
// metadata Struct is read the same.
func TestMetadata(t *testing.T) {
	want, err := structpb.NewStruct(map[string]any{
		"route": map[string]any{"cluster": "openai", "weight": 2.5},
		"tags":  []any{"premium", "1", 3, true, nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	file, err := Parse("ai.yaml", []byte(metadataPolicy))
	if err != nil {
		t.Fatal(err)
	}
	xds, err := FromRateLimitConfigs([]RateLimitConfig{{Config: &rlsconfv3.RateLimitConfig{
		Name: "ai", Domain: "ai",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "backend_name", Value: "default/openai",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "model_name_override", Value: "gpt-4", QuotaMode: true, Metadata: want,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 100},
			}},
		}, {
			Key: "plain", Metadata: &structpb.Struct{},
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1},
		}},
	}}}, DefaultPolicyBounds)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*Policy{"file": file, "xds": xds} {
		r := p.Domain("ai").Match([]Entry{{"backend_name", "default/openai"}, {"model_name_override", "gpt-4"}})
		if r == nil || !proto.Equal(r.Metadata, want) {
			t.Errorf("%s: metadata %v, want %v", name, r.Metadata, want)
		}
		if r := p.Domain("ai").Match([]Entry{{"plain", "x"}}); r == nil || r.Metadata != nil {
			t.Errorf("%s: an empty metadata: %v, want none", name, r)
		}
	}
}

// TestMetadataProblems: metadata that JSON cannot hold is refused, naming
// the field.
func TestMetadataProblems(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"not a mapping", "[a, b]", "descriptors[0].metadata: want a mapping; got a list"},
		{"a key that is not a string", "{1: a, [x]: b}", "descriptors[0].metadata:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n    metadata: "+tc.yaml+"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a problem with %q", err, tc.want)
			}
		})
	}
}
