package authz

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// Tokens of the tests: valid syntax, 16 characters or more.
const (
	shopToken    = "shop-token-0123456789abcdef"
	reportsToken = "reports-token-0123456789ab"
	bothToken    = "both-token-0123456789abcdef"
	otherToken   = "not-in-any-file-0123456789"
)

// writePolicy writes a policy and its files into a new directory and
// returns the policy's path.
func writePolicy(t testing.TB, policy string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "authz.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const semanticsPolicy = `
clients:
  - name: shop
    match:
      - uri: spiffe://example.org/ns/shop/sa/api
      - tokens: shop.tokens
    grants:
      - {domains: [shop], access: charge}
      - {domains: [catalog], access: peek}
  - name: billing
    match:
      - dns: Billing.Internal.Example
      - common_name: billing
    grants:
      - {domains: [billing], access: charge}
  - name: reports
    match:
      - common_name: reports
      - tokens: reports.tokens
    grants:
      - {domains: ["*"], access: peek}
      - {domains: [reports], access: charge}
  - name: llm
    match:
      - common_name: llm
    grants:
      - {domains: [llm], access: [charge, refund]}
      - {domains: [credits], access: refund}
      - {domains: [catalog], access: check}
`

var semanticsFiles = map[string]string{
	"shop.tokens":    "# the shop's tokens\n" + shopToken + "\n\n" + bothToken + "\n",
	"reports.tokens": reportsToken + "\n" + bothToken + "\n",
}

func cert(cn string, dns []string, uris ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			panic(err)
		}
		c.URIs = append(c.URIs, parsed)
	}
	return c
}

func bearer(token string) Identity { return Identity{}.WithAuthorization([]string{"Bearer " + token}) }

func TestAuthorize(t *testing.T) {
	p, err := Load(writePolicy(t, semanticsPolicy, semanticsFiles))
	if err != nil {
		t.Fatal(err)
	}
	shopCert := Identity{Certificate: cert("", nil, "spiffe://example.org/ns/shop/sa/api")}
	billingByDNS := Identity{Certificate: cert("someone", []string{"other.example", "billing.internal.example"})}
	billingByCN := Identity{Certificate: cert("billing", nil)}
	reportsCert := Identity{Certificate: cert("reports", nil)}
	llmCert := Identity{Certificate: cert("llm", nil)}
	stranger := Identity{Certificate: cert("stranger", []string{"shop"}, "spiffe://example.org/ns/shop/sa/other")}
	shopCertWithReportsToken := shopCert.WithAuthorization([]string{"bearer  " + reportsToken})

	tests := []struct {
		name   string
		id     Identity
		domain string
		access Access
		reason Reason // 0: allowed
		msg    string // in the refusal
	}{
		{"a URI SAN charges its domain", shopCert, "shop", Charge, 0, ""},
		{"but may not refund there: charge does not give refund", shopCert, "shop", Refund, ReasonRefund, `client "shop" may not refund in domain "shop" (granted: check+charge); this call refunds`},
		{"nor charge and refund in one call", shopCert, "shop", Charge | Refund, ReasonRefund, `client "shop" may not refund in domain "shop"`},
		{"charge and refund granted together", llmCert, "llm", Charge | Refund, 0, ""},
		{"each alone", llmCert, "llm", Refund, 0, ""},
		{"a refund grant alone refunds", llmCert, "credits", Refund, 0, ""},
		{"and checks", llmCert, "credits", Check, 0, ""},
		{"but does not charge", llmCert, "credits", Charge, ReasonPeekOnly, `client "llm" may not charge in domain "credits" (granted: check+refund); this call charges`},
		{"a check grant (peek's new name) checks", llmCert, "catalog", Check, 0, ""},
		{"and does not refund", llmCert, "catalog", Refund, ReasonRefund, `client "llm" may not refund in domain "catalog" (granted: check)`},
		{"* peek does not refund", reportsCert, "shop", Refund, ReasonRefund, `client "reports" may not refund in domain "shop"`},
		{"and peeks in it", shopCert, "shop", Check, 0, ""},
		{"a peek grant allows a peek", shopCert, "catalog", Check, 0, ""},
		{"a peek grant refuses a charge", shopCert, "catalog", Charge, ReasonPeekOnly, `client "shop" may not charge in domain "catalog"`},
		{"another tenant's domain", shopCert, "billing", Charge, ReasonDomain, `client "shop" may not call domain "billing"`},
		{"another tenant's domain, even a peek", shopCert, "billing", Check, ReasonDomain, `client "shop" may not call domain "billing"`},
		{"a DNS SAN among others", billingByDNS, "billing", Charge, 0, ""},
		{"the common name", billingByCN, "billing", Charge, 0, ""},
		{"DNS names ignore case", Identity{Certificate: cert("", []string{"BILLING.internal.example"})}, "billing", Charge, 0, ""},
		{"common names do not", Identity{Certificate: cert("Billing", nil)}, "billing", Charge, ReasonUnknownCaller, "matches no client"},
		{"domains are exact", billingByCN, "Billing", Charge, ReasonDomain, `domain "Billing"`},
		{"* peeks everywhere", reportsCert, "shop", Check, 0, ""},
		{"* peek does not charge", reportsCert, "shop", Charge, ReasonPeekOnly, `client "reports" may not charge in domain "shop"`},
		{"a charge grant beside * peek", reportsCert, "reports", Charge, 0, ""},
		{"a token", bearer(shopToken), "shop", Charge, 0, ""},
		{"a token's grants are its client's", bearer(shopToken), "billing", Check, ReasonDomain, `client "shop"`},
		{"a token in two files: both clients' grants", bearer(bothToken), "reports", Charge, 0, ""},
		{"and refusals name both", bearer(bothToken), "billing", Charge, ReasonPeekOnly, `clients "shop", "reports" may not charge in domain "billing"`},
		{"a certificate and a token: both clients' grants", shopCertWithReportsToken, "reports", Charge, 0, ""},
		{"an unknown token", bearer(otherToken), "shop", Check, ReasonBadToken, "the bearer token is not valid"},
		{"an unknown token beside a good certificate", shopCert.WithAuthorization([]string{"Bearer " + otherToken}), "shop", Check, ReasonBadToken, "not valid"},
		{"another scheme", Identity{}.WithAuthorization([]string{"Basic " + shopToken}), "shop", Check, ReasonBadToken, `not "Bearer <token>"`},
		{"no token after Bearer", Identity{}.WithAuthorization([]string{"Bearer "}), "shop", Check, ReasonBadToken, `not "Bearer <token>"`},
		{"two authorization values", Identity{}.WithAuthorization([]string{"Bearer " + shopToken, "Bearer " + shopToken}), "shop", Check, ReasonBadToken, "more than one"},
		{"nothing presented", Identity{}, "shop", Check, ReasonNoCredentials, "no client certificate or bearer token"},
		{"a certificate that matches no client (near misses)", stranger, "shop", Check, ReasonUnknownCaller, "matches no client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Authorize(tt.id, tt.domain, tt.access)
			checkRefusal(t, err, tt.reason, tt.msg)
			for _, secret := range []string{shopToken, reportsToken, bothToken, otherToken} {
				if err != nil && strings.Contains(err.Error(), secret) {
					t.Errorf("the refusal %q shows a token", err)
				}
			}
		})
	}
}

func checkRefusal(t *testing.T, err error, reason Reason, msg string) {
	t.Helper()
	if reason == 0 {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a refusal (%v)", err, reason)
	}
	if e.Reason != reason {
		t.Errorf("reason %v (%v), want %v", e.Reason, err, reason)
	}
	if got := status.Code(err); got != reason.Code() {
		t.Errorf("gRPC code %v, want %v", got, reason.Code())
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("refusal %q does not say %q", err, msg)
	}
}

func TestAnonymous(t *testing.T) {
	p, err := Load(writePolicy(t, `
clients:
  - name: shop
    match: [{common_name: shop}]
    grants: [{domains: [shop], access: charge}]
anonymous:
  grants:
    - {domains: [public], access: charge}
    - {domains: [shop], access: peek}
`, nil))
	if err != nil {
		t.Fatal(err)
	}
	none := Identity{}
	stranger := Identity{Certificate: cert("stranger", nil)}
	tests := []struct {
		name   string
		id     Identity
		domain string
		access Access
		reason Reason
		msg    string
	}{
		{"no identity: the anonymous grants", none, "public", Charge, 0, ""},
		{"anonymous peek", none, "shop", Check, 0, ""},
		{"anonymous cannot charge a peek domain", none, "shop", Charge, ReasonPeekOnly, `anonymous callers may not charge in domain "shop"`},
		{"anonymous outside its grants", none, "billing", Check, ReasonDomain, `anonymous callers may not call domain "billing"`},
		{"an unmatched certificate is anonymous", stranger, "public", Charge, 0, ""},
		{"a client does not get the anonymous grants", Identity{Certificate: cert("shop", nil)}, "public", Check, ReasonDomain, `client "shop" may not call domain "public"`},
		{"a bad token is never anonymous", bearer(otherToken), "public", Check, ReasonBadToken, "not valid"},
		{"codes: PermissionDenied", none, "billing", Charge, ReasonDomain, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRefusal(t, p.Authorize(tt.id, tt.domain, tt.access), tt.reason, tt.msg)
		})
	}
	if c := ReasonDomain.Code(); c != codes.PermissionDenied {
		t.Errorf("ReasonDomain.Code() = %v", c)
	}
}

func TestLoadErrors(t *testing.T) {
	valid := map[string]string{"ok.tokens": shopToken + "\n"}
	tests := []struct {
		name   string
		policy string
		files  map[string]string
		want   []string // each in the error, "FILE" standing for the policy's path
	}{
		{"empty", "", nil, []string{"FILE: empty"}},
		{"invalid YAML", "clients: [\n", nil, []string{"FILE:1: invalid YAML: did not find expected node content"}},
		{"unknown top-level field", "clientz: []\n", nil, []string{"FILE:1: clientz: unknown field (want one of clients, anonymous)"}},
		{"no clients, no anonymous", "clients: []\n", nil, []string{"FILE:1: clients: none, and no anonymous grants"}},
		{"client fields", `
clients:
  - match: [{common_name: a}]
    grants: [{domains: [a], access: charge}]
  - name: b
    grants: [{domains: [b], access: charge}]
  - name: c
    match: [{common_name: c}]
  - name: c
    match: [{common_name: c, dns: c.example}]
    grants: [{domains: [c], access: all}]
    extra: 1
`, nil, []string{
			"FILE:3: clients[0].name: missing",
			"FILE:5: clients[1].match: missing: a client needs at least one match rule",
			"FILE:7: clients[2].grants: missing: at least one grant",
			"FILE:9: clients[3].name: client \"c\" is already named at line 7",
			"FILE:10: clients[3].match[0]: want exactly one of common_name, dns, uri, tokens; got 2",
			"FILE:11: clients[3].grants[0].access: \"all\": want check (or peek), charge or refund, or a list of them",
			"FILE:12: clients[3].extra: unknown field",
		}},
		{"match values", `
clients:
  - name: a
    match:
      - uri: not a uri
      - dns: ""
      - email: a@example.org
      - tokens: missing.tokens
    grants: [{domains: [a, ""], access: peek}, {domains: []}]
`, nil, []string{
			`FILE:5: clients[0].match[0].uri: "not a uri" is not an absolute URI`,
			"FILE:6: clients[0].match[1].dns: empty",
			"FILE:7: clients[0].match[2].email: unknown field",
			"FILE:8: clients[0].match[3].tokens: token file DIR/missing.tokens: no such file or directory",
			`FILE:9: clients[0].grants[0].domains[1]: empty domain name`,
			"FILE:9: clients[0].grants[1].access: missing",
			"FILE:9: clients[0].grants[1].domains: missing",
		}},
		{"access lists", `
clients:
  - name: a
    match: [{common_name: a}]
    grants:
      - {domains: [a], access: [charge, all]}
      - {domains: [b], access: []}
      - {domains: [c], access: [[charge]]}
      - {domains: [d], access: {charge: true}}
`, nil, []string{
			`FILE:6: clients[0].grants[0].access[1]: "all": want check (or peek), charge or refund, or a list of them`,
			"FILE:7: clients[0].grants[1].access: empty: want check (or peek), charge or refund, or a list of them",
			"FILE:8: clients[0].grants[2].access[0]: want a string; got a list",
			"FILE:9: clients[0].grants[3].access: want a string; got a mapping",
		}},
		{"reserved name", `
clients:
  - name: anonymous
    match: [{common_name: a}]
    grants: [{domains: [a], access: peek}]
`, nil, []string{`FILE:3: clients[0].name: "anonymous" is reserved`}},
		{"anonymous without grants", "anonymous: {}\n", nil, []string{"FILE:1: anonymous.grants: missing"}},
		{"token files: problems by file and line, never the token", `
clients:
  - name: a
    match: [{tokens: bad.tokens}, {tokens: empty.tokens}, {tokens: ok.tokens}]
    grants: [{domains: [a], access: peek}]
`, map[string]string{
			"bad.tokens":   "# comment\nshort-secret\n" + shopToken + "\nspace in-the-middle-of-it\n" + strings.Repeat("x", 513) + "\n===================\n",
			"empty.tokens": "# nothing yet\n\n",
			"ok.tokens":    valid["ok.tokens"],
		}, []string{
			"DIR/bad.tokens:2: a token of 12 characters; want at least 16",
			"DIR/bad.tokens:4: a token with a character outside A-Z a-z 0-9 - . _ ~ + / at position 6",
			"DIR/bad.tokens:5: a token of 513 characters; want at most 512",
			"DIR/bad.tokens:6: a token of only '=' characters",
			"DIR/empty.tokens: no tokens",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writePolicy(t, tt.policy, tt.files)
			_, err := Load(path)
			if err == nil {
				t.Fatal("loaded")
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("%v: not a config.FieldError", err)
			}
			got := err.Error()
			for _, w := range tt.want {
				w = strings.ReplaceAll(strings.ReplaceAll(w, "FILE", path), "DIR", filepath.Dir(path))
				if !strings.Contains(got, w) {
					t.Errorf("the error does not say %q; it is:\n%s", w, got)
				}
			}
			if n := strings.Count(got, "\n") + 1; n != len(tt.want) {
				t.Errorf("%d problems, want %d:\n%s", n, len(tt.want), got)
			}
			for _, secret := range []string{"short-secret", "in-the-middle-of-it", shopToken} {
				if strings.Contains(got, secret) {
					t.Errorf("the error shows a token:\n%s", got)
				}
			}
		})
	}
}

func TestLoadBounds(t *testing.T) {
	t.Run("a file over MaxFileBytes is not read", func(t *testing.T) {
		path := writePolicy(t, "# "+strings.Repeat("x", MaxFileBytes)+"\n", nil)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than the limit of %d", MaxFileBytes)) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("aliases cannot make the walk exponential", func(t *testing.T) {
		// 300 clients × 300 grants × 300 domains if every alias were walked.
		n := func(alias string) string { return strings.TrimSuffix(strings.Repeat(alias+", ", 300), ", ") }
		policy := "x:\n" +
			"  - &g {domains: [" + n("d") + "], access: peek}\n" +
			"  - &c {name: a, match: [{common_name: a}], grants: [" + n("*g") + "]}\n" +
			"clients: [" + n("*c") + "]\n"
		path := writePolicy(t, policy, nil)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "more than 65536 list items") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestTokenNeverShown(t *testing.T) {
	id := bearer(shopToken)
	for _, s := range []string{fmt.Sprint(id), fmt.Sprintf("%v %+v %#v %s", id, id, id, id.Token)} {
		if strings.Contains(s, shopToken) {
			t.Errorf("formatted identity shows the token: %s", s)
		}
	}
}
