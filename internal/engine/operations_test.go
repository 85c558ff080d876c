package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// tokenPolicy: a token budget of 1000 a minute that takes overdraft, an
// ordinary limit of 10 a minute, a shadow overdraft budget, quota budgets
// that take overdraft, a limit that does not say, and a deny-all.
const tokenPolicy = `
domain: ai
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000, overdraft: true}
  - key: requests
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100, overdraft: true}
  - key: plan
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100, overdraft: true}
  - key: bonus
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: unsaid
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: strict
    rate_limit: {unit: minute, requests_per_unit: 100, overdraft: false}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// opEngine returns an engine on tokenPolicy and its clock, at t0, the
// start of a minute.
func opEngine(t *testing.T, opts ...Option) (*Engine, *clock.Fake) {
	t.Helper()
	p, err := config.Parse("t.yaml", []byte(tokenPolicy))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	return New(p, memory.New(clk), opts...), clk
}

// op is one descriptor of a request: key=user, asking op at cost.
type op struct {
	key  string
	op   Op
	cost uint64
}

func ask(t *testing.T, e *Engine, ops ...op) *Response {
	t.Helper()
	req := &Request{Domain: "ai"}
	for _, o := range ops {
		c := o.cost
		req.Descriptors = append(req.Descriptors, Descriptor{Entries: entries(o.key, "u"), Op: o.op, Hits: &c})
	}
	return decide(t, e, req)
}

// want is one status expected.
type want struct {
	code      algorithms.Code
	remaining int64
	kind      algorithms.Kind
}

func check(t *testing.T, step string, r *Response, code algorithms.Code, ws ...want) {
	t.Helper()
	if r.Code != code {
		t.Errorf("%s: response %v, want %v", step, r.Code, code)
	}
	for i, w := range ws {
		st := r.Statuses[i]
		if st.Code != w.code || st.Remaining != w.remaining || st.Kind != w.kind {
			t.Errorf("%s: status %d = %v remaining %d kind %v, want %v remaining %d kind %v",
				step, i, st.Code, st.Remaining, st.Kind, w.code, w.remaining, w.kind)
		}
	}
}

// TestTokenBudget is Envoy Gateway's flow on one budget: checks before
// the request, charges of the tokens used when the stream ends.
func TestTokenBudget(t *testing.T) {
	e, clk := opEngine(t)
	check(t, "check a fresh budget", ask(t, e, op{"tokens", OpCheck, 0}), algorithms.Allowed, want{algorithms.Allowed, 1000, algorithms.Check})
	check(t, "800 tokens", ask(t, e, op{"tokens", OpCharge, 800}), algorithms.Allowed, want{algorithms.Allowed, 200, algorithms.Overdraft})
	check(t, "a check charges nothing", ask(t, e, op{"tokens", OpCheck, 5}), algorithms.Allowed, want{algorithms.Allowed, 200, algorithms.Check})
	// 400 more than the 200 left: taken in full, 200 in debt. The charge's
	// decision says so: Denied, 0 remaining, 200 owed.
	clk.Advance(10 * time.Second)
	r := ask(t, e, op{"tokens", OpCharge, 400})
	check(t, "past the budget", r, algorithms.Denied, want{algorithms.Denied, 0, algorithms.Overdraft})
	if st := r.Statuses[0]; st.ResetAfter != 50*time.Second || st.RetryAfter != 50*time.Second {
		t.Errorf("in debt: reset after %v, retry after %v; want both 50s (the window's end)", st.ResetAfter, st.RetryAfter)
	}
	if st := r.Statuses[0]; st.Debt != 200 {
		t.Errorf("in debt: %d owed, want 200", st.Debt)
	}
	// Every check is denied until the window ends, with the exact wait.
	for _, at := range []time.Duration{0, 30 * time.Second, 49*time.Second + 999*time.Millisecond} {
		clk.Set(t0 + int64(10*time.Second+at))
		r := ask(t, e, op{"tokens", OpCheck, 0})
		check(t, "check in debt", r, algorithms.Denied, want{algorithms.Denied, 0, algorithms.Check})
		if wantRetry := 50*time.Second - at; r.RetryAfter != wantRetry {
			t.Errorf("check in debt at +%v: retry after %v, want %v", at, r.RetryAfter, wantRetry)
		}
		if r.Statuses[0].Debt != 200 {
			t.Errorf("check in debt at +%v: %d owed, want 200", at, r.Statuses[0].Debt)
		}
	}
	// A refund pays the debt back first: 50 of the 200.
	if r := ask(t, e, op{"tokens", OpRefund, 50}); r.Statuses[0].Debt != 150 || r.Statuses[0].Remaining != 0 {
		t.Errorf("a refund of 50 in debt: %d owed, %d remaining; want 150 and 0", r.Statuses[0].Debt, r.Statuses[0].Remaining)
	}
	clk.Set(t0 + int64(time.Minute))
	r = ask(t, e, op{"tokens", OpCheck, 0})
	check(t, "the debt is gone with its window", r, algorithms.Allowed, want{algorithms.Allowed, 1000, algorithms.Check})
	if r.Statuses[0].Debt != 0 {
		t.Errorf("the debt is gone with its window: %d owed, want 0", r.Statuses[0].Debt)
	}
}

// TestOverdraftCombinesWithOrdinaryLimits: the combining rule of the
// package doc, one case per clause.
func TestOverdraftCombinesWithOrdinaryLimits(t *testing.T) {
	t.Run("overdraft into debt denies the ordinary charge, and is applied", func(t *testing.T) {
		e, _ := opEngine(t)
		r := ask(t, e, op{"tokens", OpCharge, 1500}, op{"requests", OpCharge, 1})
		check(t, "together", r, algorithms.Denied, want{algorithms.Denied, 0, algorithms.Overdraft}, want{algorithms.Allowed, 10, algorithms.Admit})
		check(t, "after", ask(t, e, op{"requests", OpCheck, 0}), algorithms.Allowed, want{algorithms.Allowed, 10, algorithms.Check})
		check(t, "the debt stays", ask(t, e, op{"tokens", OpRefund, 499}), algorithms.Allowed, want{algorithms.Allowed, 0, algorithms.Refund})
		check(t, "paid back by a refund", ask(t, e, op{"tokens", OpRefund, 2}), algorithms.Allowed, want{algorithms.Allowed, 1, algorithms.Refund})
	})
	t.Run("an ordinary denial does not stop the overdraft", func(t *testing.T) {
		e, _ := opEngine(t)
		ask(t, e, op{"requests", OpCharge, 10})
		r := ask(t, e, op{"tokens", OpCharge, 300}, op{"requests", OpCharge, 1})
		check(t, "together", r, algorithms.Denied, want{algorithms.Allowed, 700, algorithms.Overdraft}, want{algorithms.Denied, 0, algorithms.Admit})
	})
	t.Run("a refund never denies and is applied in a denied request", func(t *testing.T) {
		e, _ := opEngine(t)
		ask(t, e, op{"tokens", OpCharge, 600}, op{"requests", OpCharge, 10})
		r := ask(t, e, op{"tokens", OpRefund, 100}, op{"requests", OpCharge, 1})
		check(t, "together", r, algorithms.Denied, want{algorithms.Allowed, 500, algorithms.Refund}, want{algorithms.Denied, 0, algorithms.Admit})
		check(t, "never past rest", ask(t, e, op{"tokens", OpRefund, 5000}), algorithms.Allowed, want{algorithms.Allowed, 1000, algorithms.Refund})
	})
	t.Run("a shadow overdraft is applied and never denies", func(t *testing.T) {
		e, _ := opEngine(t)
		r := ask(t, e, op{"watch", OpCharge, 150}, op{"requests", OpCharge, 1})
		check(t, "together", r, algorithms.Allowed, want{algorithms.Denied, 0, algorithms.Overdraft}, want{algorithms.Allowed, 9, algorithms.Admit})
		check(t, "in debt", ask(t, e, op{"watch", OpCheck, 0}), algorithms.Allowed, want{algorithms.Denied, 0, algorithms.Check})
	})
	t.Run("a deny-all limit denies the request; the overdraft still lands", func(t *testing.T) {
		e, _ := opEngine(t)
		r := ask(t, e, op{"tokens", OpCharge, 100}, op{"closed", OpCharge, 1}, op{"requests", OpCharge, 1})
		check(t, "together", r, algorithms.Denied, want{algorithms.Allowed, 900, algorithms.Overdraft}, want{algorithms.OverCapacity, 0, algorithms.Admit}, want{algorithms.Allowed, 10, algorithms.Admit})
		check(t, "a check of deny-all", ask(t, e, op{"closed", OpCheck, 0}), algorithms.Denied, want{algorithms.OverCapacity, 0, algorithms.Check})
		check(t, "a refund to deny-all", ask(t, e, op{"closed", OpRefund, 3}), algorithms.Allowed, want{algorithms.Allowed, 0, algorithms.Refund})
	})
	t.Run("a check denies the request's admissions", func(t *testing.T) {
		e, _ := opEngine(t)
		ask(t, e, op{"tokens", OpCharge, 1000})
		r := ask(t, e, op{"tokens", OpCheck, 0}, op{"requests", OpCharge, 1})
		check(t, "together", r, algorithms.Denied, want{algorithms.Denied, 0, algorithms.Check}, want{algorithms.Allowed, 10, algorithms.Admit})
	})
	t.Run("a quota retry applies an overdraft once", func(t *testing.T) {
		e, _ := opEngine(t)
		// plan goes 50 into debt: over its limit, so the request goes
		// through on bonus, retried with plan as a shadow.
		r := ask(t, e, op{"plan", OpCharge, 150}, op{"bonus", OpCharge, 1})
		check(t, "retried", r, algorithms.Allowed, want{algorithms.Denied, 0, algorithms.Overdraft}, want{algorithms.Allowed, 4, algorithms.Admit})
		// Applied once: 50 in debt, so a refund of 50 is exactly back to 0
		// remaining and one more unit gives 1.
		check(t, "refund the debt", ask(t, e, op{"plan", OpRefund, 50}), algorithms.Allowed, want{algorithms.Allowed, 0, algorithms.Refund})
		check(t, "one more", ask(t, e, op{"plan", OpRefund, 1}), algorithms.Allowed, want{algorithms.Allowed, 1, algorithms.Refund})
	})
}

// TestOverdraftByDefault: the daemon-wide default applies to limits that
// do not say overdraft:, never to those that do.
func TestOverdraftByDefault(t *testing.T) {
	for _, byDefault := range []bool{false, true} {
		e, _ := opEngine(t, WithOverdraftByDefault(byDefault))
		// 150 never fits in 100: over capacity, unless taken in full.
		unsaid, wantCode := algorithms.Admit, algorithms.OverCapacity
		if byDefault {
			unsaid, wantCode = algorithms.Overdraft, algorithms.Denied
		}
		r := ask(t, e, op{"unsaid", OpCharge, 150})
		check(t, "unsaid", r, algorithms.Denied, want{wantCode, 100 - 100*boolInt(byDefault), unsaid})
		check(t, "strict", ask(t, e, op{"strict", OpCharge, 150}), algorithms.Denied, want{algorithms.OverCapacity, 100, algorithms.Admit})
		check(t, "overdraft always on a strict limit", askOverdraft(t, e, "strict", OverdraftAlways, 150), algorithms.Denied, want{algorithms.Denied, 0, algorithms.Overdraft})
		check(t, "overdraft never on an overdraft limit must fit", askOverdraft(t, e, "tokens", OverdraftNever, 1001), algorithms.Denied, want{algorithms.OverCapacity, 1000, algorithms.Admit})
		check(t, "a peek stays a peek", ask(t, e, op{"tokens", OpCharge, 0}), algorithms.Allowed, want{algorithms.Allowed, 1000, algorithms.Admit})
	}
}

// askOverdraft asks a charge of cost on key=u with overdraft o.
func askOverdraft(t *testing.T, e *Engine, key string, o Overdraft, cost uint64) *Response {
	t.Helper()
	return decide(t, e, &Request{Domain: "ai", Descriptors: []Descriptor{{Entries: entries(key, "u"), Overdraft: o, Hits: &cost}}})
}

// TestOverdrew: a status says when its charge was taken in full into debt
// — the usage counted though the code is Denied — and only then.
func TestOverdrew(t *testing.T) {
	e, _ := opEngine(t)
	for _, step := range []struct {
		name     string
		resp     func() *Response
		overdrew []bool
	}{
		{"a charge that fits", func() *Response { return ask(t, e, op{"tokens", OpCharge, 900}) }, []bool{false}},
		{"a charge that must fit and does not", func() *Response { return askOverdraft(t, e, "tokens", OverdraftNever, 200) }, []bool{false}},
		{"a charge past what is left, beside an ordinary one", func() *Response {
			return ask(t, e, op{"requests", OpCharge, 1}, op{"tokens", OpCharge, 200})
		}, []bool{false, true}},
		{"a check of the bucket in debt", func() *Response { return ask(t, e, op{"tokens", OpCheck, 0}) }, []bool{false}},
		{"a peek", func() *Response { return ask(t, e, op{"tokens", OpCharge, 0}) }, []bool{false}},
		{"a refund", func() *Response { return ask(t, e, op{"tokens", OpRefund, 50}) }, []bool{false}},
		{"a charge on a bucket already in debt", func() *Response { return ask(t, e, op{"tokens", OpCharge, 1}) }, []bool{true}},
		{"a shadow rule's", func() *Response { return ask(t, e, op{"watch", OpCharge, 101}) }, []bool{true}},
		{"an ordinary limit's denial", func() *Response { return ask(t, e, op{"strict", OpCharge, 101}) }, []bool{false}},
	} {
		r := step.resp()
		for i, want := range step.overdrew {
			if got := r.Statuses[i].Overdrew; got != want {
				t.Errorf("%s: status %d overdrew %v, want %v (code %v, remaining %d)", step.name, i, got, want, r.Statuses[i].Code, r.Statuses[i].Remaining)
			}
		}
	}
}

// TestOverdraftOnlyOnCharges: a check or a refund that says whether it may
// overdraw is invalid, naming the field.
func TestOverdraftOnlyOnCharges(t *testing.T) {
	e, _ := opEngine(t)
	for _, op := range []Op{OpCheck, OpRefund} {
		for _, o := range []Overdraft{OverdraftNever, OverdraftAlways} {
			var resp Response
			one := uint64(1)
			err := e.ShouldRateLimit(context.Background(), &Request{Domain: "ai", Descriptors: []Descriptor{
				{Entries: entries("requests", "u")},
				{Entries: entries("tokens", "u"), Op: op, Overdraft: o, Hits: &one},
			}}, &resp)
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != "descriptors[1].overdraft" {
				t.Fatalf("%v with overdraft %v: %v, want an InvalidError of descriptors[1].overdraft", op, o, err)
			}
			if want := "is " + o.String() + ", but the descriptor asks a " + op.String() + ": only a charge may overdraw"; inv.Problem != want {
				t.Errorf("problem %q, want %q", inv.Problem, want)
			}
		}
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestOneOperationPerBucket: descriptors naming one bucket share a charge
// when they ask the same operation — each reported on the running total —
// and make the request invalid when not.
func TestOneOperationPerBucket(t *testing.T) {
	e, _ := opEngine(t)
	check(t, "two refunds sum", ask(t, e, op{"tokens", OpCharge, 500}), algorithms.Allowed, want{algorithms.Allowed, 500, algorithms.Overdraft})
	r := ask(t, e, op{"tokens", OpRefund, 100}, op{"tokens", OpRefund, 150})
	check(t, "two refunds sum", r, algorithms.Allowed, want{algorithms.Allowed, 600, algorithms.Refund}, want{algorithms.Allowed, 750, algorithms.Refund})
	check(t, "summed", ask(t, e, op{"tokens", OpCheck, 0}), algorithms.Allowed, want{algorithms.Allowed, 750, algorithms.Check})
	var resp Response
	c0, c1 := uint64(0), uint64(5)
	err := e.ShouldRateLimit(context.Background(), &Request{Domain: "ai", Descriptors: []Descriptor{
		{Entries: entries("tokens", "u"), Op: OpCheck, Hits: &c0},
		{Entries: entries("tokens", "u"), Op: OpRefund, Hits: &c1},
	}}, &resp)
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Field != "descriptors[1]" {
		t.Fatalf("check and refund of one bucket: %v, want an InvalidError of descriptors[1]", err)
	}
	if want := "asks refund of the bucket that descriptors[0] asks check of; one request asks one operation of a bucket"; inv.Problem != want {
		t.Errorf("problem %q, want %q", inv.Problem, want)
	}
}
