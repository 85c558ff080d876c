package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// refundPolicy: a daily limit of 1 that takes no refunds, one that takes
// them, and a limit nested under the first, which does not inherit it.
const refundPolicy = `
domain: ai
descriptors:
  - key: guarded
    refunds: false
    rate_limit: {unit: day, requests_per_unit: 1}
    descriptors:
      - key: model
        rate_limit: {unit: day, requests_per_unit: 1}
  - key: open
    rate_limit: {unit: day, requests_per_unit: 1}
`

// TestRefundRefusedByRule: a request in which a descriptor asks a refund of
// a refunds: false rule is refused with a *RefusedError naming the
// descriptor and the rule, whatever its cost, and nothing of it is applied;
// so charging and refunding cannot go on past the limit. Other rules,
// nested ones and inline limits take refunds as before.
func TestRefundRefusedByRule(t *testing.T) {
	p, err := config.Parse("t.yaml", []byte(refundPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := New(p, memory.New(clock.NewFake(t0)))
	u := func(v uint64) *uint64 { return &v }
	d := func(key string, o Op, cost uint64) Descriptor {
		return Descriptor{Entries: entries(key, "u"), Op: o, Hits: u(cost)}
	}
	nested := Descriptor{Entries: append(entries("guarded", "u"), config.Entry{Key: "model", Value: "m"}), Op: OpRefund, Hits: u(1)}
	inline := Descriptor{Entries: entries("guarded", "u"), Op: OpRefund, Hits: u(1), Limit: &InlineLimit{Algorithm: algorithms.FixedWindow, Requests: 1, Period: 86400e9}}

	steps := []struct {
		name    string
		req     Request
		refused string // the error; "" for a decision
		code    algorithms.Code
	}{
		{"the day's one charge", Request{Domain: "ai", Descriptors: []Descriptor{d("guarded", OpCharge, 1)}}, "", algorithms.Allowed},
		{"a refund of it is refused", Request{Domain: "ai", Descriptors: []Descriptor{d("guarded", OpRefund, 1)}},
			"descriptors[0]: asks a refund of rule ai.guarded, which takes no refunds (refunds: false in its policy)", 0},
		{"a refund of 0 too", Request{Domain: "ai", Descriptors: []Descriptor{d("open", OpCharge, 1), d("guarded", OpRefund, 0)}},
			"descriptors[1]: asks a refund of rule ai.guarded", 0},
		{"so the next charge is denied", Request{Domain: "ai", Descriptors: []Descriptor{d("guarded", OpCharge, 1)}}, "", algorithms.Denied},
		{"and the refused request charged nothing", Request{Domain: "ai", Descriptors: []Descriptor{d("open", OpCharge, 1)}}, "", algorithms.Allowed},
		{"a rule without the setting takes refunds", Request{Domain: "ai", Descriptors: []Descriptor{d("open", OpRefund, 1)}}, "", algorithms.Allowed},
		{"so its bucket admits again", Request{Domain: "ai", Descriptors: []Descriptor{d("open", OpCharge, 1)}}, "", algorithms.Allowed},
		{"a nested rule does not inherit it", Request{Domain: "ai", Descriptors: []Descriptor{nested}}, "", algorithms.Allowed},
		{"an inline limit is no rule of the policy", Request{Domain: "ai", Descriptors: []Descriptor{inline}}, "", algorithms.Allowed},
		{"checks and charges of the rule go on", Request{Domain: "ai", Descriptors: []Descriptor{d("guarded", OpCheck, 0)}}, "", algorithms.Denied},
	}
	for _, s := range steps {
		var resp Response
		err := e.ShouldRateLimit(context.Background(), &s.req, &resp)
		if s.refused != "" {
			var re *RefusedError
			if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), s.refused) {
				t.Fatalf("%s: got %v, want a *RefusedError %q", s.name, err, s.refused)
			}
			continue
		}
		if err != nil || resp.Code != s.code {
			t.Fatalf("%s: got %v, %v; want %v", s.name, resp.Code, err, s.code)
		}
	}
}
