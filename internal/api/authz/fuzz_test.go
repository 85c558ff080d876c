package authz

import (
	"strings"
	"testing"
)

// FuzzPolicy: whatever a policy file holds, parsing it never panics, and
// it yields either a policy whose clients all have names and grants, or
// problems that each name the file and a line within it.
func FuzzPolicy(f *testing.F) {
	f.Add([]byte(semanticsPolicy))
	f.Add([]byte("anonymous: {grants: [{domains: ['*'], access: peek}]}\n"))
	f.Add([]byte("clients: [&c {name: a, match: [{dns: a}], grants: [{domains: [a], access: charge}]}, *c]\n"))
	f.Add([]byte("clients:\n  - name: a\n    match: [{uri: '%zz'}]\n"))
	f.Add([]byte("---\n---\nclients: 1\n"))
	f.Add([]byte("\r\u0a7d")) // a lone \r is a line break to YAML
	f.Fuzz(func(t *testing.T, data []byte) {
		ps := newParser("authz.yaml")
		ps.document(data)
		// YAML breaks lines at \n, \r\n and a lone \r: at most one line per
		// \n or \r, plus the first.
		lines := strings.Count(string(data), "\n") + strings.Count(string(data), "\r") + 1
		for _, e := range ps.errs {
			if e.File != "authz.yaml" || e.Line < 0 || e.Line > lines || e.Problem == "" {
				t.Fatalf("problem %+v (the file has %d lines)", *e, lines)
			}
		}
		if len(ps.errs) > 0 {
			return
		}
		for _, c := range ps.p.clients {
			if c.name == "" || (c.all == 0 && len(c.domains) == 0) {
				t.Fatalf("client %+v accepted", *c)
			}
		}
	})
}
