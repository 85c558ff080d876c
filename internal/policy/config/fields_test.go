package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestLaterUpstreamFields: media.yaml, with quota_mode, metadata,
// share_threshold and value_to_metric, loads, and each rule carries what
// the engine needs of them.
func TestLaterUpstreamFields(t *testing.T) {
	p, err := Load("testdata/envoy/media.yaml")
	if err != nil {
		t.Fatalf("Load:\n%v", err)
	}
	d := p.Domain("media")
	tests := []struct {
		request string
		statKey string
		quota   bool
		shared  []string
	}{
		{"path=/uploads/a.png", "media.path_/uploads/*", false, []string{"/uploads/*"}},
		{"path=/uploads/", "media.path_/uploads/*", false, []string{"/uploads/*"}},
		{"path=/thumbs/a.png", "media.path_/thumbs/*", false, nil},
		{"bucket=cold-eu,tenant=acme", "media.bucket_cold-*.tenant", false, []string{"cold-*", ""}},
		{"plan_quota=acme", "media.plan_quota", true, nil},
		{"bonus_quota=acme", "media.bonus_quota", true, nil},
	}
	for _, tt := range tests {
		r := d.Match(entries(tt.request))
		if r == nil {
			t.Errorf("Match(%s) = nil, want %s", tt.request, tt.statKey)
			continue
		}
		if r.StatKey != tt.statKey || r.QuotaMode != tt.quota || !reflect.DeepEqual(r.Shared, tt.shared) {
			t.Errorf("Match(%s) = %s quota %v shared %q, want %s quota %v shared %q",
				tt.request, r.StatKey, r.QuotaMode, r.Shared, tt.statKey, tt.quota, tt.shared)
		}
	}
	if r := d.Match(entries("bucket=cold-eu")); r != nil {
		t.Errorf("the share_threshold level without a limit matched %s", r.StatKey)
	}
}

func TestLaterUpstreamFieldErrors(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"share_threshold without a wildcard", `
domain: d
descriptors:
  - key: path
    value: /exact
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
`, `test.yaml:6: descriptors[0].share_threshold: applies to a wildcard value (one holding a *); value "/exact" is not one`},
		{"share_threshold on a key alone", `
domain: d
descriptors:
  - key: path
    share_threshold: yes
    rate_limit: {unit: second, requests_per_unit: 1}
`, `test.yaml:5: descriptors[0].share_threshold: applies to a wildcard value (one holding a *); value "" is not one`},
		{"metadata not a mapping", `
domain: d
descriptors:
  - key: k
    metadata: [a, b]
    rate_limit: {unit: second, requests_per_unit: 1}
`, `test.yaml:5: descriptors[0].metadata: want a mapping; got a list`},
		{"quota_mode not a boolean", `
domain: d
descriptors:
  - key: k
    quota_mode: sometimes
    rate_limit: {unit: second, requests_per_unit: 1}
`, `test.yaml:5: descriptors[0].quota_mode: want true or false; got "sometimes"`},
		{"value_to_metric not a boolean", `
domain: d
descriptors:
  - key: k
    value_to_metric: 2
    rate_limit: {unit: second, requests_per_unit: 1}
`, `test.yaml:5: descriptors[0].value_to_metric: want true or false; got 2`},
		{"fields of a descriptor, not of rate_limit", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, quota_mode: true}
`, `test.yaml:5: descriptors[0].rate_limit.quota_mode: unknown field`},
	}
	for _, tt := range tests {
		_, err := Parse("test.yaml", []byte(tt.file))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: got %v\nwant %s", tt.name, err, tt.want)
		}
	}
}

// TestLaterUpstreamFieldsView: /policies shows share_threshold on its
// wildcard and quota_mode on its rule.
func TestLaterUpstreamFieldsView(t *testing.T) {
	p, err := Load("testdata/envoy/media.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]bool{}
	var walk func([]DescriptorView)
	walk = func(ds []DescriptorView) {
		for _, d := range ds {
			got[d.Key+"="+d.Value] = [2]bool{d.ShareThreshold, d.QuotaMode}
			walk(d.Descriptors)
		}
	}
	walk(p.View().Domains[0].Descriptors)
	for k, want := range map[string][2]bool{
		"path=/uploads/*": {true, false}, "path=/thumbs/*": {false, false}, "bucket=cold-*": {true, false},
		"tenant=": {false, false}, "plan_quota=": {false, true}, "bonus_quota=": {false, true},
	} {
		if got[k] != want {
			t.Errorf("%s: share_threshold, quota_mode = %v, want %v", k, got[k], want)
		}
	}
}
