package config

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// gatewayConfig is a resource shaped as Envoy Gateway sends them: one per
// listener, a generic_key descriptor per rule with a nested header match.
func gatewayConfig() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{
		Name:   "default/eg/http",
		Domain: "default/eg/http",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:   "httproute/default/r/rule/0/match/0/example",
			Value: "httproute/default/r/rule/0/match/0/example",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key:       "rule-0-match-0",
				Value:     "rule-0-match-0",
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 3, Name: "per_rule"},
			}, {
				Key:       "user",
				RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_UNKNOWN},
			}},
		}},
	}
}

// The same policy as a file says it.
const gatewayYAML = `
domain: default/eg/http
descriptors:
  - key: httproute/default/r/rule/0/match/0/example
    value: httproute/default/r/rule/0/match/0/example
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        rate_limit: {unit: hour, requests_per_unit: 3, name: per_rule}
      - key: user
        rate_limit: {unlimited: true}
`

func viewJSON(t *testing.T, p *Policy) string {
	t.Helper()
	v := p.View()
	for i := range v.Domains {
		v.Domains[i].Source = ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFromRateLimitConfigsEqualsTheFile(t *testing.T) {
	got, err := FromRateLimitConfigs([]RateLimitConfig{{Config: gatewayConfig()}}, DefaultPolicyBounds)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse("gateway.yaml", []byte(gatewayYAML))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := viewJSON(t, got), viewJSON(t, want); g != w {
		t.Errorf("policy from xDS:\n%s\nfrom the file:\n%s", g, w)
	}
	if src := got.Domain("default/eg/http").Source; src != "xds:default/eg/http" {
		t.Errorf("source %q, want xds:default/eg/http", src)
	}
}

func TestFromRateLimitConfigsEmptyIsEmptyPolicy(t *testing.T) {
	p, err := FromRateLimitConfigs(nil, DefaultPolicyBounds)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Domains()) != 0 || p.Domain("anything") != nil {
		t.Errorf("domains %v, want none", p.Domains())
	}
}

func TestFromRateLimitConfigsExtensions(t *testing.T) {
	ext, err := structpb.NewStruct(map[string]any{"limits": map[string]any{
		"per_rule": map[string]any{"algorithm": "token_bucket", "burst": 20, "overdraft": true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := FromRateLimitConfigs([]RateLimitConfig{{Config: gatewayConfig(), Extensions: ext}}, DefaultPolicyBounds)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Domain("default/eg/http").Match([]Entry{
		{"httproute/default/r/rule/0/match/0/example", "httproute/default/r/rule/0/match/0/example"},
		{"rule-0-match-0", "rule-0-match-0"},
	})
	if r == nil {
		t.Fatal("no rule matched")
	}
	rate := r.Limits[0].Rate
	if rate.Algorithm().String() != "token_bucket" || rate.Burst() != 20 || r.Limits[0].Overdraft != OverdraftOn {
		t.Errorf("limit %v burst %d overdraft %v, want token_bucket burst 20 overdraft on", rate.Algorithm(), rate.Burst(), r.Limits[0].Overdraft)
	}
}

// A concurrency over xDS: the resource names the limit and leaves its rate
// unset (unit UNKNOWN, requests_per_unit 0); the extension says the rest.
func TestFromRateLimitConfigsConcurrency(t *testing.T) {
	ext, err := structpb.NewStruct(map[string]any{"limits": map[string]any{
		"per_rule": map[string]any{"algorithm": "concurrency", "max_in_flight": 20, "lease": "10m"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rc := gatewayConfig()
	rc.Descriptors[0].Descriptors[0].RateLimit = &rlsconfv3.RateLimitPolicy{Name: "per_rule"}
	p, err := FromRateLimitConfigs([]RateLimitConfig{{Config: rc, Extensions: ext}}, DefaultPolicyBounds)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Domain("default/eg/http").Match([]Entry{
		{"httproute/default/r/rule/0/match/0/example", "httproute/default/r/rule/0/match/0/example"},
		{"rule-0-match-0", "rule-0-match-0"},
	})
	if r == nil {
		t.Fatal("no rule matched")
	}
	if rate := r.Limits[0].Rate; rate.Algorithm().String() != "concurrency" || rate.Requests() != 20 || rate.Period() != 10*time.Minute {
		t.Errorf("limit %v %d per %v, want concurrency of 20 with a lease of 10m", rate.Algorithm(), rate.Requests(), rate.Period())
	}
	// A resource that sets a rate besides is refused, as a file would be.
	_, err = FromRateLimitConfigs([]RateLimitConfig{{Config: gatewayConfig(), Extensions: ext}}, DefaultPolicyBounds)
	if err == nil || !strings.Contains(err.Error(), "rate_limit.unit: not allowed with algorithm: concurrency") {
		t.Errorf("a concurrency with a unit: %v", err)
	}
}

func TestFromRateLimitConfigsProblems(t *testing.T) {
	ext := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	unknownUnit := gatewayConfig()
	unknownUnit.Descriptors[0].Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	noKey := gatewayConfig()
	noKey.Descriptors[0].Key = ""
	for _, tc := range []struct {
		name    string
		configs []RateLimitConfig
		want    string
	}{
		{"unit UNKNOWN", []RateLimitConfig{{Config: unknownUnit}},
			"xds:default/eg/http: descriptors[0].descriptors[0].rate_limit.unit: missing"},
		{"empty key", []RateLimitConfig{{Config: noKey}},
			"xds:default/eg/http: descriptors[0].key: empty"},
		{"the same domain twice", []RateLimitConfig{{Config: gatewayConfig()}, {Config: &rlsconfv3.RateLimitConfig{Name: "again", Domain: "default/eg/http"}}},
			`xds:again: domain: domain "default/eg/http" is already defined in xds:default/eg/http`},
		{"extension of no limit", []RateLimitConfig{{Config: gatewayConfig(), Extensions: ext(map[string]any{"limits": map[string]any{"nope": map[string]any{"burst": 2}}})}},
			`xds:default/eg/http: extensions: limits.nope: no limit of this resource is named "nope"`},
		{"burst on a window", []RateLimitConfig{{Config: gatewayConfig(), Extensions: ext(map[string]any{"limits": map[string]any{"per_rule": map[string]any{"burst": 2}}})}},
			"xds:default/eg/http: descriptors[0].descriptors[0].rate_limit.burst: not allowed with algorithm fixed_window"},
		{"unknown extension field", []RateLimitConfig{{Config: gatewayConfig(), Extensions: ext(map[string]any{"limits": map[string]any{"per_rule": map[string]any{"colour": "red"}}})}},
			"descriptors[0].descriptors[0].rate_limit.colour: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromRateLimitConfigs(tc.configs, DefaultPolicyBounds)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v, want Errors", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain %q", err, tc.want)
			}
			for _, fe := range errs {
				if fe.Line != 0 {
					t.Errorf("%v: line %d, want 0 (no line of the sender's)", fe, fe.Line)
				}
			}
		})
	}
}

func TestFromRateLimitConfigsCountsDescriptorsTogether(t *testing.T) {
	a, b := gatewayConfig(), gatewayConfig()
	b.Name, b.Domain = "other", "other"
	_, err := FromRateLimitConfigs([]RateLimitConfig{{Config: a}, {Config: b}}, PolicyBounds{MaxBytes: 1 << 20, MaxDescriptors: 4})
	if err == nil || !strings.Contains(err.Error(), "more than 4 descriptors") {
		t.Errorf("error %v, want more than 4 descriptors", err)
	}
}

// everyFieldConfig sets every field of the resource that changes a
// decision: an AI Gateway QuotaPolicy shape (a premium tenant's quota
// beside a shared default one), and upstream's shadow, detailed,
// unlimited, replaces and week.
func everyFieldConfig() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{
		Name:   "ai-gateway/quota",
		Domain: "ai-gateway",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "backend", Value: "openai",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "tenant", Value: "premium", QuotaMode: true, DetailedMetric: true,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 40, Name: "premium",
					Replaces: []*rlsconfv3.RateLimitReplace{{Name: "weekly"}}},
			}, {
				Key: "default", QuotaMode: true,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 10},
			}, {
				Key: "trial", ShadowMode: true,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 5, Name: "weekly"},
			}, {
				Key:       "internal",
				RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true},
			}},
		}},
	}
}

const everyFieldYAML = `
domain: ai-gateway
descriptors:
  - key: backend
    value: openai
    descriptors:
      - key: tenant
        value: premium
        quota_mode: true
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 40, name: premium, replaces: [{name: weekly}]}
      - key: default
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 10}
      - key: trial
        shadow_mode: true
        rate_limit: {unit: week, requests_per_unit: 5, name: weekly}
      - key: internal
        rate_limit: {unlimited: true}
`

// TestFromRateLimitConfigsReadsEveryField: every field of the resource
// gives the policy the same field of a file gives it.
func TestFromRateLimitConfigsReadsEveryField(t *testing.T) {
	got, err := FromRateLimitConfigs([]RateLimitConfig{{Config: everyFieldConfig()}}, DefaultPolicyBounds)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse("quota.yaml", []byte(everyFieldYAML))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := viewJSON(t, got), viewJSON(t, want); g != w {
		t.Errorf("policy from xDS:\n%s\nfrom the file:\n%s", g, w)
	}
	r := got.Domain("ai-gateway").Match([]Entry{{"backend", "openai"}, {"tenant", "premium"}})
	if r == nil || !r.QuotaMode || !r.DetailedMetric || r.Limits[0].Name != "premium" || len(r.Limits[0].Replaces) != 1 {
		t.Errorf("premium rule %+v, want quota_mode, detailed_metric, named premium, replacing weekly", r)
	}
}

// TestReadFieldsListsEveryField: every field of the module's messages is
// read. A module upgrade that brings a field fails here until the field is
// mapped (or the refusal of it is deliberate and this test says so).
func TestReadFieldsListsEveryField(t *testing.T) {
	seen := map[protoreflect.FullName]bool{}
	var visit func(md protoreflect.MessageDescriptor)
	visit = func(md protoreflect.MessageDescriptor) {
		read, listed := readFields[md.FullName()]
		if !listed || seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if !slices.Contains(read, f.Name()) {
				t.Errorf("%s.%s is not read", md.FullName(), f.Name())
			}
			if f.Message() != nil {
				visit(f.Message())
			}
		}
		for _, name := range read {
			if fields.ByName(name) == nil {
				t.Errorf("%s has no field %s", md.FullName(), name)
			}
		}
	}
	visit((&rlsconfv3.RateLimitConfig{}).ProtoReflect().Descriptor())
	if len(seen) != len(readFields) {
		t.Errorf("visited %d messages, readFields lists %d", len(seen), len(readFields))
	}
}

// TestFromRateLimitConfigsRefusesUnknownFields: a field the module does not
// know (a newer control plane's), anywhere in the resource, is a problem
// named by its place and number, not ignored.
func TestFromRateLimitConfigsRefusesUnknownFields(t *testing.T) {
	withUnknown := func(m proto.Message, num protowire.Number) {
		b := protowire.AppendTag(nil, num, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		m.ProtoReflect().SetUnknown(b)
	}
	top := gatewayConfig()
	withUnknown(top, 4)
	desc := everyFieldConfig()
	withUnknown(desc.Descriptors[0].Descriptors[2], 9)
	limit := everyFieldConfig()
	withUnknown(limit.Descriptors[0].Descriptors[0].RateLimit, 6)
	replace := everyFieldConfig()
	withUnknown(replace.Descriptors[0].Descriptors[0].RateLimit.Replaces[0], 2)
	for _, tc := range []struct {
		name string
		c    *rlsconfv3.RateLimitConfig
		want string
	}{
		{"top", top, "xds:default/eg/http: unknown field number 4 (RateLimitConfig has no such field"},
		{"descriptor", desc, "xds:ai-gateway/quota: descriptors[0].descriptors[2]: unknown field number 9 (RateLimitDescriptor"},
		{"limit", limit, "xds:ai-gateway/quota: descriptors[0].descriptors[0].rate_limit: unknown field number 6 (RateLimitPolicy"},
		{"replaces", replace, "xds:ai-gateway/quota: descriptors[0].descriptors[0].rate_limit.replaces[0]: unknown field number 2 (RateLimitReplace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromRateLimitConfigs([]RateLimitConfig{{Config: tc.c}}, DefaultPolicyBounds)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "refused rather than ignored") {
				t.Errorf("error %v\nwant %q", err, tc.want)
			}
		})
	}
}

// BenchmarkFromRateLimitConfigs builds a policy of 10,000 descriptors from
// an xDS resource.
func BenchmarkFromRateLimitConfigs(b *testing.B) {
	c := &rlsconfv3.RateLimitConfig{Name: "flat", Domain: "flat"}
	for i := range 10_000 {
		c.Descriptors = append(c.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: "k", Value: strconv.Itoa(i),
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromRateLimitConfigs([]RateLimitConfig{{Config: c}}, DefaultPolicyBounds); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFromRateLimitConfigsProblemsBounded: the problems of a response of
// many bad resources are listed up to 1000, and the resources left are
// counted, not checked.
func TestFromRateLimitConfigsProblemsBounded(t *testing.T) {
	configs := make([]RateLimitConfig, 5000)
	for i := range configs {
		configs[i].Config = &rlsconfv3.RateLimitConfig{Name: strconv.Itoa(i)} // no domain
	}
	_, err := FromRateLimitConfigs(configs, DefaultPolicyBounds)
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1001 {
		t.Fatalf("%d problems, want 1000 and a count", len(errs))
	}
	if last := errs[1000].Error(); last != "xds: 4000 more resources not checked, after 1000 problems" {
		t.Errorf("last problem %q", last)
	}
}
