package authz

import "testing"

// TestCaller: a caller is named by the clients it matches, sorted, each
// once; a caller that matches none, or whose token is not valid, by "".
func TestCaller(t *testing.T) {
	p, err := Load(writePolicy(t, `
clients:
  - name: zeta
    match: [{common_name: api}, {dns: api.example}]
    grants: [{domains: [shop], access: charge}]
  - name: alpha
    match: [{tokens: alpha.tokens}, {uri: "spiffe://example.org/api"}]
    grants: [{domains: [shop], access: charge}]
anonymous:
  grants: [{domains: [public], access: charge}]
`, map[string]string{"alpha.tokens": "alpha-0123456789abcdefghij\n"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   Identity
		want string
	}{
		{"no credentials", Identity{}, ""},
		{"a token", bearer("alpha-0123456789abcdefghij"), "alpha"},
		{"a token no file holds", bearer("nobody-0123456789abcdefghij"), ""},
		{"a certificate matching zeta twice", Identity{Certificate: cert("api", []string{"api.example"})}, "zeta"},
		{"a certificate matching both", Identity{Certificate: cert("api", nil, "spiffe://example.org/api")}, "alpha,zeta"},
		{"a certificate matching none", Identity{Certificate: cert("other", nil)}, ""},
	} {
		if got := p.Caller(tc.id); got != tc.want {
			t.Errorf("%s: Caller = %q, want %q", tc.name, got, tc.want)
		}
	}
}
