package authz

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// counter returns the value of a's counter (reloads or denied) with the
// given label value, as a registry gathers it.
func counter(t *testing.T, a *Authorizer, which, label string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "ratelimitd_authz_"+which+"_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s counter labelled %q", which, label)
	return 0
}

func replace(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRunFollowsTokenFiles: Run watches the token files the policy names
// as the policy changes, including one a rejected policy names before it
// exists, in another directory.
func TestRunFollowsTokenFiles(t *testing.T) {
	path := writePolicy(t, `
clients:
  - name: shop
    match: [{tokens: shop.tokens}]
    grants: [{domains: [shop], access: charge}]
`, map[string]string{"shop.tokens": shopToken + "\n"})
	logs := &logtest.Buffer{}
	a, err := New(path, WithDebounce(20*time.Millisecond), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	allowed := func(token, domain string) bool { return a.Authorize(bearer(token), domain, Charge) == nil }

	// The policy names a token file elsewhere that does not exist yet.
	other := t.TempDir()
	otherTokens := filepath.Join(other, "reports.tokens")
	replace(t, path, `
clients:
  - name: shop
    match: [{tokens: shop.tokens}]
    grants: [{domains: [shop], access: charge}]
  - name: reports
    match: [{tokens: `+otherTokens+`}]
    grants: [{domains: [reports], access: charge}]
`)
	wait.For(t, "the failed reload", func() bool { return counter(t, a, "reloads", "failure") >= 1 })
	if !allowed(shopToken, "shop") || allowed(reportsToken, "reports") {
		t.Fatal("a rejected policy changed the decisions")
	}
	// Its arrival is seen, though no other file changes.
	replace(t, otherTokens, reportsToken+"\n")
	wait.For(t, "the reports token", func() bool { return allowed(reportsToken, "reports") })
	// And from then on, changes to it.
	replace(t, otherTokens, bothToken+"\n")
	wait.For(t, "the rotated reports token", func() bool { return allowed(bothToken, "reports") && !allowed(reportsToken, "reports") })

	if got := counter(t, a, "reloads", "success"); got != 2 {
		t.Errorf("successful reloads %v, want 2", got)
	}
	if s := logs.String(); strings.Contains(s, reportsToken) || strings.Contains(s, bothToken) || !strings.Contains(s, "reports.tokens: no such file or directory") {
		t.Errorf("logs:\n%s", s)
	}
}

// TestReloadUnchanged: a reload of the same bytes changes nothing and
// counts nothing; a denial is counted by reason.
func TestReloadUnchanged(t *testing.T) {
	a, err := New(writePolicy(t, semanticsPolicy, semanticsFiles))
	if err != nil {
		t.Fatal(err)
	}
	before := a.Policy()
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.Policy() != before || counter(t, a, "reloads", "success") != 0 {
		t.Error("a reload of the same files replaced the policy")
	}
	a.Authorize(Identity{}, "shop", Check)
	a.Authorize(bearer(shopToken), "billing", Check)
	a.Authorize(bearer(shopToken), "billing", Charge)
	for reason, want := range map[string]float64{"no_credentials": 1, "domain": 2, "peek_only": 0} {
		if got := counter(t, a, "denied", reason); got != want {
			t.Errorf("denied{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}
