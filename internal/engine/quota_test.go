package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

const quotaPolicy = `
domain: q
descriptors:
  - key: plan
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: bonus
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: spent
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: global
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: watch
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    quota_mode: true
    rate_limit: {unlimited: true}
`

// TestQuotaMode: quota descriptors deny a request only when all of them
// are over their limits; other descriptors deny as always; a denied
// request is charged nowhere.
func TestQuotaMode(t *testing.T) {
	type status struct {
		code      algorithms.Code
		remaining int64
	}
	steps := []struct {
		name     string
		request  []string // key=value per descriptor, one entry each
		want     algorithms.Code
		retry    time.Duration
		never    bool
		statuses []status
	}{
		{"both quotas have room", []string{"plan", "bonus", "global"}, algorithms.Allowed, 0, false,
			[]status{{algorithms.Allowed, 1}, {algorithms.Allowed, 0}, {algorithms.Allowed, 2}}},
		// bonus is spent: the request goes through on plan, bonus reports
		// its denial and is not charged.
		{"one quota spent", []string{"plan", "bonus", "global"}, algorithms.Allowed, 0, false,
			[]status{{algorithms.Allowed, 0}, {algorithms.Denied, 0}, {algorithms.Allowed, 1}}},
		// Both spent: denied, retry when the first quota has room again
		// (bonus, in 1s, not plan, in 60s); global is not charged.
		{"every quota spent", []string{"plan", "bonus", "global"}, algorithms.Denied, time.Second, false,
			[]status{{algorithms.Denied, 0}, {algorithms.Denied, 0}, {algorithms.Allowed, 1}}},
		{"a single quota decides alone", []string{"plan"}, algorithms.Denied, time.Minute, false,
			[]status{{algorithms.Denied, 0}}},
		// An unlimited quota always has room.
		{"an unlimited quota beside a spent one", []string{"free", "plan"}, algorithms.Allowed, 0, false,
			[]status{{algorithms.Allowed, UnlimitedRemaining}, {algorithms.Denied, 0}}},
		// A deny-all quota is a spent quota that never refills.
		{"deny-all quota beside one with room", []string{"spent", "global"}, algorithms.Denied, 0, true,
			[]status{{algorithms.OverCapacity, 0}, {algorithms.Allowed, 1}}},
		// A shadow quota_mode rule is a shadow rule: it neither denies nor
		// counts as a quota with room (and, the request denied, is not
		// charged).
		{"shadow quota", []string{"watch", "plan"}, algorithms.Denied, time.Minute, false,
			[]status{{algorithms.Allowed, 1}, {algorithms.Denied, 0}}},
	}
	e := newEngine(t, quotaPolicy)
	for _, s := range steps {
		req := &Request{Domain: "q"}
		for _, k := range s.request {
			req.Descriptors = append(req.Descriptors, Descriptor{Entries: entries(k, "alice")})
		}
		r := decide(t, e, req)
		if r.Code != s.want || r.RetryAfter != s.retry || r.Never != s.never {
			t.Errorf("%s: %v retry %v never %v, want %v retry %v never %v", s.name, r.Code, r.RetryAfter, r.Never, s.want, s.retry, s.never)
		}
		for i, st := range r.Statuses {
			if i < len(s.statuses) && (st.Code != s.statuses[i].code || st.Remaining != s.statuses[i].remaining) {
				t.Errorf("%s: %s %v remaining %d, want %v remaining %d", s.name, s.request[i], st.Code, st.Remaining, s.statuses[i].code, s.statuses[i].remaining)
			}
		}
	}

	// A quota over its limit beside a descriptor that is not a quota and
	// over its limit: denied by the latter, retry the longer.
	e = newEngine(t, quotaPolicy)
	both := &Request{Domain: "q", Descriptors: []Descriptor{{Entries: entries("bonus", "bob")}, {Entries: entries("global", "bob")}}}
	decide(t, e, both)
	for range 2 {
		decide(t, e, &Request{Domain: "q", Descriptors: []Descriptor{{Entries: entries("global", "bob")}}})
	}
	r := decide(t, e, both)
	if r.Code != algorithms.Denied || r.RetryAfter != time.Minute || r.Statuses[0].Code != algorithms.Denied || r.Statuses[1].Code != algorithms.Denied {
		t.Errorf("bonus and global spent: %+v", r)
	}
}

// countingStore is the memory store, counting its Apply calls.
type countingStore struct {
	*memory.Store
	calls int
}

func (c *countingStore) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	c.calls++
	return c.Store.Apply(ctx, charges, decisions)
}

// aiGatewayPolicy is what Envoy AI Gateway's translator makes of a
// QuotaPolicy on backend default/openai, model gpt-4 (a premium tenant's
// bucket rule, a per-tenant shadow rule, the default bucket), and of
// another on default/backup, model gpt-4o (its default bucket alone), in
// budgets small enough to spend in a test.
const aiGatewayPolicy = `
domain: ai-gateway-quota
descriptors:
  - key: backend_name
    value: default/openai
    descriptors:
      - key: model_name_override
        value: gpt-4
        descriptors:
          - key: rule-0-x-tenant-id|premium-match-0
            value: rule-0-x-tenant-id|premium-match-0
            quota_mode: true
            rate_limit: {unit: hour, requests_per_unit: 5}
          - key: rule-1-x-tenant-id-match-0
            quota_mode: true
            shadow_mode: true
            rate_limit: {unit: hour, requests_per_unit: 1}
          - key: rule-2-match--1
            value: rule-2-match--1
            quota_mode: true
            rate_limit: {unit: hour, requests_per_unit: 2}
  - key: backend_name
    value: default/backup
    descriptors:
      - key: model_name_override
        value: gpt-4o
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
`

// TestQuotaScopes plays the request-path descriptors Envoy sends for
// AI Gateway's QuotaPolicy (one per bucket: backend, model, rule) and
// holds the answers to what its docs promise: a request is allowed while
// one related bucket has room (Shared mode), 429 once every one is spent,
// a shadow rule never denies (nor lets a request through); scopes name a
// backend's model and say which still has room. Each request is one store
// call.
func TestQuotaScopes(t *testing.T) {
	const (
		premium = "rule-0-x-tenant-id|premium-match-0"
		tenant  = "rule-1-x-tenant-id-match-0"
		dflt    = "rule-2-match--1"
	)
	openai := func(rule, value string) Descriptor {
		return Descriptor{Entries: entries("backend_name", "default/openai", "model_name_override", "gpt-4", rule, value)}
	}
	backup := Descriptor{Entries: entries("backend_name", "default/backup", "model_name_override", "gpt-4o")}
	premiumReq := []Descriptor{openai(premium, premium), openai(tenant, "premium-tenant"), openai(dflt, dflt)}
	acmeReq := []Descriptor{openai(tenant, "acme"), openai(dflt, dflt)}
	type scope struct {
		name string
		room bool
	}
	steps := []struct {
		name   string
		req    []Descriptor
		want   algorithms.Code
		codes  []algorithms.Code
		scopes []scope
	}{
		{"premium: every bucket has room", premiumReq, algorithms.Allowed,
			[]algorithms.Code{algorithms.Allowed, algorithms.Allowed, algorithms.Allowed}, []scope{{"default/openai gpt-4", true}}},
		// The tenant's shadow bucket is spent: reported, never denying.
		{"premium: the default bucket's last unit", premiumReq, algorithms.Allowed,
			[]algorithms.Code{algorithms.Allowed, algorithms.Denied, algorithms.Allowed}, []scope{{"default/openai gpt-4", true}}},
		// The default bucket is spent; the premium tenant's own has room.
		{"premium: on its own bucket", premiumReq, algorithms.Allowed,
			[]algorithms.Code{algorithms.Allowed, algorithms.Denied, algorithms.Denied}, []scope{{"default/openai gpt-4", true}}},
		// Another tenant has only the spent default bucket (its shadow
		// rule has room, and lets nothing through).
		{"acme: every related bucket spent", acmeReq, algorithms.Denied,
			[]algorithms.Code{algorithms.Allowed, algorithms.Denied}, []scope{{"default/openai gpt-4", false}}},
		// A route that fails over to default/backup: its model has room.
		{"acme with a backup: admitted on the backup", append(acmeReq[:2:2], backup), algorithms.Allowed,
			[]algorithms.Code{algorithms.Allowed, algorithms.Denied, algorithms.Allowed},
			[]scope{{"default/openai gpt-4", false}, {"default/backup gpt-4o", true}}},
		{"acme with a spent backup", append(acmeReq[:2:2], backup), algorithms.Denied,
			[]algorithms.Code{algorithms.Denied, algorithms.Denied, algorithms.Denied},
			[]scope{{"default/openai gpt-4", false}, {"default/backup gpt-4o", false}}},
	}
	p, err := config.Parse("q.yaml", []byte(aiGatewayPolicy))
	if err != nil {
		t.Fatal(err)
	}
	s := &countingStore{Store: memory.New(clock.NewFake(t0))}
	e := New(p, s)
	for _, st := range steps {
		s.calls = 0
		r := decide(t, e, &Request{Domain: "ai-gateway-quota", Descriptors: st.req})
		if r.Code != st.want || s.calls != 1 {
			t.Errorf("%s: %v after %d store calls, want %v after 1", st.name, r.Code, s.calls, st.want)
		}
		for i, c := range st.codes {
			if r.Statuses[i].Code != c {
				t.Errorf("%s: descriptor %d %v, want %v", st.name, i, r.Statuses[i].Code, c)
			}
		}
		var got []scope
		for _, sc := range r.Scopes {
			got = append(got, scope{sc.Entries[0].Value + " " + sc.Entries[1].Value, sc.Room})
		}
		if !slices.Equal(got, st.scopes) {
			t.Errorf("%s: scopes %v, want %v", st.name, got, st.scopes)
		}
	}
}
