package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

const shadowPolicy = `
domain: d
descriptors:
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 10, name: wide}
  - key: narrow
    rate_limit: {unit: minute, requests_per_unit: 1, name: narrow}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0, name: blocked}
`

// TestShadowMode: in global shadow mode a request that would be denied is
// admitted, the buckets that admitted it are charged, the one that denied
// it is not, and its status still says it denied.
func TestShadowMode(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		e := newEngine(t, shadowPolicy, WithShadowMode(shadow))
		both := &Request{Domain: "d", Descriptors: []Descriptor{
			{Entries: entries("wide", "k")}, {Entries: entries("narrow", "k")}}}
		decide(t, e, both)
		r := decide(t, e, both)
		wantCode, wantRemaining := algorithms.Denied, int64(9)
		if shadow {
			wantCode, wantRemaining = algorithms.Allowed, 8
		}
		if r.Code != wantCode || r.Shadowed != shadow {
			t.Fatalf("shadow=%v: code %v shadowed %v, want %v %v", shadow, r.Code, r.Shadowed, wantCode, shadow)
		}
		if shadow && (r.RetryAfter != 0 || r.Never) {
			t.Fatalf("shadowed response carries retry %v never %v", r.RetryAfter, r.Never)
		}
		if st := r.Statuses[1]; st.Code != algorithms.Denied || st.Shadow || st.RetryAfter <= 0 {
			t.Fatalf("shadow=%v: narrow status %+v, want denied (not a shadow rule) with a retry", shadow, st)
		}
		if got := r.Statuses[0].Remaining; got != wantRemaining {
			t.Fatalf("shadow=%v: wide remaining %d, want %d", shadow, got, wantRemaining)
		}
		peek := uint64(0)
		p := decide(t, e, &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("narrow", "k"), Hits: &peek}}})
		if got := p.Statuses[0].Remaining; got != 0 {
			t.Fatalf("shadow=%v: narrow remaining %d after the denial, want 0 (a denied charge is never applied)", shadow, got)
		}
	}
}

// TestShadowModeDenyAll: a deny-all limit does not stop the other buckets
// from being charged in global shadow mode, as the request goes through.
func TestShadowModeDenyAll(t *testing.T) {
	e := newEngine(t, shadowPolicy, WithShadowMode(true))
	r := decide(t, e, &Request{Domain: "d", Descriptors: []Descriptor{
		{Entries: entries("wide", "k")}, {Entries: entries("blocked", "k")}}})
	if r.Code != algorithms.Allowed || !r.Shadowed || r.Statuses[1].Code != algorithms.OverCapacity {
		t.Fatalf("got %+v", r)
	}
	if got := r.Statuses[0].Remaining; got != 9 {
		t.Fatalf("wide remaining %d, want 9 (charged)", got)
	}
}

func TestInlineNeedsDomain(t *testing.T) {
	e := newEngine(t, shadowPolicy)
	inline := &InlineLimit{Algorithm: algorithms.FixedWindow, Requests: 1, Period: time.Minute}
	tests := []struct {
		name        string
		domain      string
		needsDomain bool
		wantMatched bool
	}{
		{"known domain", "d", true, true},
		{"unknown domain", "elsewhere", true, false},
		{"unknown domain, flag off", "elsewhere", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := decide(t, e, &Request{Domain: tt.domain, InlineNeedsDomain: tt.needsDomain,
				Descriptors: []Descriptor{{Entries: entries("any", tt.name), Limit: inline}}})
			st := r.Statuses[0]
			if st.Matched != tt.wantMatched || (st.Limit != nil) != tt.wantMatched || st.Code != algorithms.Allowed {
				t.Fatalf("status %+v, want matched=%v", st, tt.wantMatched)
			}
		})
	}
	// A bad inline limit is rejected in an unknown domain too.
	var resp Response
	err := e.ShouldRateLimit(t.Context(), &Request{Domain: "elsewhere", InlineNeedsDomain: true,
		Descriptors: []Descriptor{{Entries: entries("k", "v"), Limit: &InlineLimit{Algorithm: algorithms.FixedWindow, Period: time.Second}}}}, &resp)
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Field != "descriptors[0].limit" {
		t.Fatalf("err %v, want an InvalidError for descriptors[0].limit", err)
	}
}

func TestMostRestrictive(t *testing.T) {
	limit := &config.Limit{Name: "l"}
	unlimited := &config.Limit{Unlimited: true}
	allowed := func(remaining int64) Status {
		return Status{Code: algorithms.Allowed, Limit: limit, Remaining: remaining}
	}
	denied := func(retry time.Duration) Status {
		return Status{Code: algorithms.Denied, Limit: limit, RetryAfter: retry}
	}
	shadowDenied := denied(time.Hour)
	shadowDenied.Shadow = true
	tests := []struct {
		name     string
		statuses []Status
		want     int
	}{
		{"none", nil, -1},
		{"unmatched only", []Status{{Code: algorithms.Allowed}}, -1},
		{"unlimited is never restrictive", []Status{{Code: algorithms.Allowed, Limit: unlimited, Remaining: UnlimitedRemaining}}, -1},
		{"fewest remaining", []Status{allowed(5), allowed(2), allowed(3)}, 1},
		{"first on a tie", []Status{allowed(2), allowed(2)}, 0},
		{"denied beats admitted", []Status{allowed(0), denied(time.Second)}, 1},
		{"longest retry among denials", []Status{denied(time.Second), denied(time.Minute), denied(time.Millisecond)}, 1},
		{"over capacity beats denied", []Status{denied(time.Minute), {Code: algorithms.OverCapacity, Limit: limit}}, 1},
		{"shadow rules do not compete", []Status{allowed(7), shadowDenied}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Response{Statuses: tt.statuses}
			if got := r.MostRestrictive(); got != tt.want {
				t.Fatalf("MostRestrictive() = %d, want %d", got, tt.want)
			}
		})
	}
}
