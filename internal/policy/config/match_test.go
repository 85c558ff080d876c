package config

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// matchPolicy names each limit after the descriptor that carries it, so a
// test says which descriptor a request matched by its limit's name.
const matchPolicy = `
domain: m
descriptors:
  # One key with an exact value, two wildcards and a key-only descriptor.
  - key: k
    value: exact
    rate_limit: {name: k=exact, unit: second, requests_per_unit: 1}
  - key: k
    value: ex*
    rate_limit: {name: k=ex*, unit: second, requests_per_unit: 1}
  - key: k
    value: e*
    rate_limit: {name: k=e*, unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {name: k, unit: second, requests_per_unit: 1}

  # The broader wildcard first: file order decides, not the longer prefix.
  - key: order
    value: a*
    rate_limit: {name: order=a*, unit: second, requests_per_unit: 1}
  - key: order
    value: ab*
    rate_limit: {name: order=ab*, unit: second, requests_per_unit: 1}

  - key: any
    value: "*"
    rate_limit: {name: any=*, unit: second, requests_per_unit: 1}
  - key: lit
    value: a*b
    rate_limit: {name: lit=a*b, unit: second, requests_per_unit: 1}
  - key: multi
    value: svc*ep*rpc
    rate_limit: {name: multi=svc*ep*rpc, unit: second, requests_per_unit: 1}
  - key: suffix
    value: "*.png"
    rate_limit: {name: suffix=*.png, unit: second, requests_per_unit: 1}
  - key: x_y
    value: z
    rate_limit: {name: x_y=z, unit: second, requests_per_unit: 1}

  # Nested: exact, wildcard and key-only at the second level.
  - key: svc
    value: auth
    descriptors:
      - key: user
        value: admin
        rate_limit: {name: svc=auth/user=admin, unit: second, requests_per_unit: 1}
      - key: user
        value: bot-*
        rate_limit: {name: svc=auth/user=bot-*, unit: second, requests_per_unit: 1}
      - key: user
        rate_limit: {name: svc=auth/user, unit: second, requests_per_unit: 1}
  # A wildcard at the first level with an exact value under it.
  - key: svc
    value: pay*
    descriptors:
      - key: user
        value: bob
        rate_limit: {name: svc=pay*/user=bob, unit: second, requests_per_unit: 1}
  # Key-only at every level, a limit at each, a wildcard at the third.
  - key: svc
    rate_limit: {name: svc, unit: second, requests_per_unit: 1}
    descriptors:
      - key: user
        rate_limit: {name: svc/user, unit: second, requests_per_unit: 1}
        descriptors:
          - key: path
            value: /api/*
            rate_limit: {name: svc/user/path=/api/*, unit: second, requests_per_unit: 1}

  # No backtracking from an exact value to the key-only descriptor.
  - key: tenant
    value: acme
    descriptors:
      - key: plan
        value: gold
        rate_limit: {name: tenant=acme/plan=gold, unit: second, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: plan
        rate_limit: {name: tenant/plan, unit: second, requests_per_unit: 1}

  # A descriptor with neither limit nor children shadows the key-only one.
  - key: ip
    value: 10.0.0.1
  - key: ip
    rate_limit: {name: ip, unit: second, requests_per_unit: 1}

  # A limit only at depth two.
  - key: a
    descriptors:
      - key: b
        rate_limit: {name: a/b, unit: second, requests_per_unit: 1}
`

// entries parses "k=v,k2=v2" into entries.
func entries(s string) []Entry {
	if s == "" {
		return nil
	}
	var es []Entry
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		es = append(es, Entry{k, v})
	}
	return es
}

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return p
}

func TestMatch(t *testing.T) {
	d := mustParse(t, matchPolicy).Domain("m")
	tests := []struct {
		name    string
		request string // entries as k=v,k=v
		want    string // the matched limit's name; "" for no match
	}{
		{"exact beats wildcards that also match", "k=exact", "k=exact"},
		{"wildcard beats key-only", "k=exx", "k=ex*"},
		{"wildcard matches its bare prefix", "k=ex", "k=ex*"},
		{"second wildcard", "k=eat", "k=e*"},
		{"key-only takes any other value", "k=zzz", "k"},
		{"key-only takes the empty value", "k=", "k"},
		{"first wildcard in file order wins", "order=abc", "order=a*"},
		{"wildcard * matches any value", "any=whatever", "any=*"},
		{"wildcard * matches the empty value", "any=", "any=*"},
		// A * anywhere is a wildcard, as upstream reads it.
		{"* inside a value matches itself", "lit=a*b", "lit=a*b"},
		{"* inside a value matches any run", "lit=axxb", "lit=a*b"},
		{"* inside a value matches the empty run", "lit=ab", "lit=a*b"},
		{"* inside a value is not a prefix", "lit=a", ""},
		{"* inside a value: the suffix must follow", "lit=abx", ""},
		{"several *s, in order", "multi=svc-1-ep-2-rpc", "multi=svc*ep*rpc"},
		{"several *s, parts out of order", "multi=svc-rpc-ep", ""},
		{"several *s, parts may not overlap", "multi=svcrpc", ""},
		{"leading *: a suffix", "suffix=img.png", "suffix=*.png"},
		{"leading *: not a prefix", "suffix=.pngx", ""},
		{"keys are exact, not joined with values", "x=y_z", ""},
		{"key with underscore", "x_y=z", "x_y=z"},
		{"keys are case-sensitive", "K=exact", ""},
		{"values are case-sensitive", "tenant=ACME,plan=gold", "tenant/plan"},
		{"unknown key", "nope=1", ""},
		{"no entries", "", ""},

		{"nested exact", "svc=auth,user=admin", "svc=auth/user=admin"},
		{"nested wildcard", "svc=auth,user=bot-7", "svc=auth/user=bot-*"},
		{"nested key-only", "svc=auth,user=carol", "svc=auth/user"},
		{"wildcard then exact", "svc=payments,user=bob", "svc=pay*/user=bob"},
		{"key-only at two levels", "svc=search,user=carol", "svc/user"},
		{"wildcard at depth three", "svc=search,user=carol,path=/api/v1", "svc/user/path=/api/*"},
		{"wildcard at depth three, no match", "svc=search,user=carol,path=/web", ""},

		{"no backtracking from a wildcard", "svc=payments,user=alice", ""},
		{"no backtracking from an exact value", "tenant=acme,plan=free", ""},
		{"exact value then exact value", "tenant=acme,plan=gold", "tenant=acme/plan=gold"},
		{"key-only then key-only", "tenant=initech,plan=free", "tenant/plan"},
		{"no limit, no children: unmatched", "ip=10.0.0.1", ""},
		{"beside it, key-only", "ip=10.0.0.2", "ip"},

		{"shorter: placeholder without a limit", "svc=auth", ""},
		{"shorter: limit only deeper", "a=1", ""},
		{"depth equal", "a=1,b=2", "a/b"},
		{"a node with a limit and children, at its depth", "svc=search", "svc"},
		{"longer than a leaf", "k=exact,extra=1", ""},
		{"longer than the tree", "a=1,b=2,c=3", ""},
		{"longer than a nested leaf", "svc=auth,user=admin,x=y", ""},
		{"second entry has no descriptor", "svc=auth,group=x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := d.Match(entries(tt.request))
			got := ""
			if r != nil {
				got = r.Limits[0].Name
			}
			if got != tt.want {
				t.Errorf("Match(%s) = %q, want %q", tt.request, got, tt.want)
			}
		})
	}
}

func TestMatchNilDomain(t *testing.T) {
	p := mustParse(t, matchPolicy)
	if r := p.Domain("unknown").Match(entries("k=exact")); r != nil {
		t.Errorf("unknown domain matched %q", r.StatKey)
	}
}

func TestStatKey(t *testing.T) {
	d := mustParse(t, matchPolicy).Domain("m")
	tests := []struct{ request, want string }{
		{"k=exact", "m.k_exact"},
		{"k=other", "m.k"},
		{"k=exx", "m.k_ex*"},
		{"svc=payments,user=bob", "m.svc_pay*.user_bob"},
		{"svc=s,user=u,path=/api/x", "m.svc.user.path_/api/*"},
	}
	for _, tt := range tests {
		if r := d.Match(entries(tt.request)); r == nil || r.StatKey != tt.want {
			t.Errorf("Match(%s).StatKey = %v, want %q", tt.request, r, tt.want)
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	d := mustParse(t, matchPolicy).Domain("m")
	for _, req := range []string{
		"k=exact", "k=exx", "k=zzz", "order=abc", "any=x", "nope=1",
		"svc=auth,user=bot-7", "svc=search,user=carol,path=/api/v1",
		"tenant=acme,plan=free", "a=1,b=2,c=3",
	} {
		es := entries(req)
		if n := testing.AllocsPerRun(100, func() { d.Match(es) }); n != 0 {
			t.Errorf("Match(%s) allocates %v times", req, n)
		}
	}
}

func TestMatchConcurrent(t *testing.T) {
	d := Default().Domain("default")
	es := entries("path=/orders,user=alice")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				if d.Match(es) == nil {
					t.Error("no match")
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkMatch(b *testing.B) {
	// A wide level: 1000 exact values, 10 wildcards and a key-only rule.
	var wide strings.Builder
	wide.WriteString("domain: wide\ndescriptors:\n")
	for i := range 1000 {
		fmt.Fprintf(&wide, "  - {key: user, value: u%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	for i := range 10 {
		fmt.Fprintf(&wide, "  - {key: user, value: w%d*, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	wide.WriteString("  - {key: user, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	wd := mustParse(b, wide.String()).Domain("wide")
	dd := Default().Domain("default")

	for _, bm := range []struct {
		name  string
		d     *Domain
		es    []Entry
		match bool
	}{
		{"default/global", dd, entries("generic_key=global"), true},
		{"default/per-endpoint", dd, entries("path=/orders"), true},
		{"default/per-user-per-endpoint", dd, entries("path=/orders,user=alice"), true},
		{"default/miss", dd, entries("tenant=acme"), false},
		{"wide/exact", wd, entries("user=u500"), true},
		{"wide/last-wildcard", wd, entries("user=w9-x"), true},
		{"wide/key-only", wd, entries("user=nobody"), true},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if (bm.d.Match(bm.es) != nil) != bm.match {
					b.Fatal("unexpected result")
				}
			}
		})
	}
}
