package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRefunds: refunds: false makes the rule beside it refuse refunds
// (Rule.NoRefunds); absent, true or null, the rule takes them; nested
// descriptors do not inherit it; /policies shows it.
func TestRefunds(t *testing.T) {
	p := mustParse(t, `
domain: llm
descriptors:
  - key: tenant
    refunds: false
    rate_limit: {unit: day, requests_per_unit: 1}
    descriptors:
      - key: model
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: explicit
    refunds: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: nothing
    refunds: ~
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: absent
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: yaml11
    refunds: no
    rate_limits: [{unit: day, requests_per_unit: 1}]
`)
	d := p.Domain("llm")
	for _, tt := range []struct {
		request   string
		noRefunds bool
	}{
		{"tenant=acme", true},
		{"tenant=acme,model=m", false},
		{"explicit=x", false},
		{"nothing=x", false},
		{"absent=x", false},
		{"yaml11=x", true},
	} {
		r := d.Match(entries(tt.request))
		if r == nil || r.NoRefunds != tt.noRefunds {
			t.Errorf("Match(%s) = %+v, want NoRefunds %v", tt.request, r, tt.noRefunds)
		}
	}
	js, err := json.Marshal(p.View().Domains[0].Descriptors)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(js), `"refunds":false`); got != 2 {
		t.Errorf("/policies shows refunds: false %d times, want 2 (tenant, yaml11):\n%s", got, js)
	}
}

func TestRefundsErrors(t *testing.T) {
	for _, tt := range []struct{ name, file, want string }{
		{"not a boolean", `
domain: d
descriptors:
  - key: k
    refunds: never
    rate_limit: {unit: second, requests_per_unit: 1}
`, `test.yaml:5: descriptors[0].refunds: want true or false; got "never"`},
		{"false on a descriptor without limits, which nothing would enforce", `
domain: d
descriptors:
  - key: tenant
    refunds: false
    descriptors:
      - key: model
        rate_limit: {unit: second, requests_per_unit: 1}
`, `test.yaml:5: descriptors[0].refunds: false refuses refunds of this descriptor's own limits, and it has none`},
		{"a field of the descriptor, not of rate_limit", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, refunds: false}
`, `test.yaml:5: descriptors[0].rate_limit.refunds: unknown field`},
	} {
		_, err := Parse("test.yaml", []byte(tt.file))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: got %v\nwant %s", tt.name, err, tt.want)
		}
	}
	if _, err := Parse("test.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    refunds: true\n")); err != nil {
		t.Errorf("refunds: true on a descriptor without limits (what every rule does anyway): %v", err)
	}
}
