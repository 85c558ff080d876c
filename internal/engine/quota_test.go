package engine

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/config"
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

// hookStore is the memory store, running after once, after its first
// Apply returns: another request arriving between the engine's two store
// calls.
type hookStore struct {
	*memory.Store
	after func()
	calls int
}

func (h *hookStore) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	err := h.Store.Apply(ctx, charges, decisions)
	if h.calls++; h.calls == 1 {
		h.after()
	}
	return err
}

// TestQuotaModeRace: the quota that had room is spent by another request
// between the engine's two store calls. The request is then denied, as
// every quota is spent, and charged nowhere.
func TestQuotaModeRace(t *testing.T) {
	p, err := config.Parse("q.yaml", []byte(quotaPolicy))
	if err != nil {
		t.Fatal(err)
	}
	s := &hookStore{Store: memory.New(clock.NewFake(t0))}
	e := New(p, s)
	alice := func(keys ...string) *Request {
		r := &Request{Domain: "q"}
		for _, k := range keys {
			r.Descriptors = append(r.Descriptors, Descriptor{Entries: entries(k, "alice")})
		}
		return r
	}
	s.after = func() {}
	decide(t, e, alice("bonus")) // bonus spent
	s.calls = 0
	s.after = func() {
		spend := alice("plan")
		spend.Hits = 2
		if r := decide(t, e, spend); r.Code != algorithms.Allowed {
			t.Errorf("spending plan: %v", r.Code)
		}
	}
	r := decide(t, e, alice("plan", "bonus", "global"))
	if r.Code != algorithms.Denied || r.RetryAfter != time.Second || s.calls != 3 {
		t.Errorf("got %v retry %v after %d store calls, want denied, retry 1s, 3 calls", r.Code, r.RetryAfter, s.calls)
	}
	if got := r.Statuses[2].Remaining; got != 3 {
		t.Errorf("global remaining %d, want 3 (charged nowhere)", got)
	}
}
