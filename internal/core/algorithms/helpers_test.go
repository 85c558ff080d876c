package algorithms

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"
)

const (
	ns   = time.Nanosecond
	ms   = time.Millisecond
	sec  = time.Second
	day  = 24 * time.Hour
	year = 365 * day
)

// t0 is where the fake timelines start: 2026-01-01T00:00:00Z in Unix
// nanoseconds, as algotest.Start (which in-package tests cannot import).
const t0 = benchStart

func mustLimit(tb testing.TB, alg Algorithm, requests int64, period time.Duration, burst int64) Limit {
	tb.Helper()
	l, err := NewLimit(alg, requests, period, burst)
	if err != nil {
		tb.Fatalf("NewLimit(%v, %d, %v, %d): %v", alg, requests, period, burst, err)
	}
	return l
}

// checkedDecide is l.Decide(s, now, cost) checked against the contract
// that holds for every decision on a State that l produced, whatever the
// algorithm:
//
//   - a peek, a denial and OverCapacity leave the state unchanged;
//   - Remaining is within [0, Capacity]; durations are not negative;
//     RetryAfter only for a denial, Delay only for an admitted queue charge;
//   - waiting exactly RetryAfter admits the same cost, 1ns less does not;
//   - Remaining r means a cost of r is admitted now and r+1 is not;
//   - ResetAfter is when the bucket is back at rest (a peek sees Capacity
//     remaining then and not 1ns before), and matches the state's RestAt;
//   - a state at rest decides as State{} does.
func checkedDecide(l Limit, s State, now, cost int64) (State, Decision, error) {
	next, d := l.Decide(s, now, cost)
	now = min(max(now, 0), MaxTime) // as Decide takes it
	fail := func(format string, args ...any) (State, Decision, error) {
		return next, d, fmt.Errorf("%+v: "+format, append([]any{d}, args...)...)
	}
	capacity := l.Capacity()

	switch {
	case cost > capacity && d.Code != OverCapacity:
		return fail("cost above capacity %d not OverCapacity", capacity)
	case cost <= 0 && d.Code != Allowed:
		return fail("a peek is not Allowed")
	case cost > 0 && cost <= capacity && d.Code == OverCapacity:
		return fail("OverCapacity for a cost within capacity %d", capacity)
	}
	if (d.Code != Allowed || cost <= 0) && next != s {
		return fail("state changed from %+v to %+v", s, next)
	}
	if d.Remaining < 0 || d.Remaining > capacity {
		return fail("Remaining outside [0, %d]", capacity)
	}
	if d.ResetAfter < 0 || d.RetryAfter < 0 || d.Delay < 0 {
		return fail("negative duration")
	}
	if d.Code != Denied && d.RetryAfter != 0 {
		return fail("RetryAfter without a denial")
	}
	if d.Delay != 0 && (l.Algorithm() != LeakyBucketQueue || d.Code != Allowed || cost <= 0) {
		return fail("Delay outside an admitted queue charge")
	}
	if d.Code == Allowed && cost > 0 && d.Remaining > capacity-cost {
		return fail("Remaining after a charge of %d above %d", cost, capacity-cost)
	}

	if d.Code == Denied {
		if d.RetryAfter <= 0 {
			return fail("denied with no RetryAfter")
		}
		if retry := now + int64(d.RetryAfter); retry <= MaxTime {
			if _, e := l.Decide(s, retry, cost); e.Code != Allowed {
				return fail("after RetryAfter: %+v", e)
			}
			if _, e := l.Decide(s, retry-1, cost); e.Code != Denied {
				return fail("1ns before RetryAfter: %+v", e)
			}
		}
	}

	if r := d.Remaining; r > 0 {
		if _, e := l.Decide(next, now, r); e.Code != Allowed {
			return fail("a cost of Remaining is not admitted: %+v", e)
		}
	}
	if r := d.Remaining; r < capacity {
		if _, e := l.Decide(next, now, r+1); e.Code != Denied {
			return fail("a cost of Remaining+1 is not denied: %+v", e)
		}
	}

	if want := max(next.RestAt()-now, 0); int64(d.ResetAfter) != want {
		return fail("ResetAfter disagrees with RestAt-now = %d", want)
	}
	if reset := now + int64(d.ResetAfter); reset <= MaxTime {
		if _, e := l.Decide(next, reset, 0); e.Remaining != capacity || e.ResetAfter != 0 {
			return fail("not at rest after ResetAfter: %+v", e)
		}
		if !next.AtRest(reset) {
			return fail("AtRest false after ResetAfter")
		}
		if d.ResetAfter > 0 {
			if _, e := l.Decide(next, reset-1, 0); e.Remaining == capacity {
				return fail("at rest 1ns before ResetAfter: %+v", e)
			}
		}
	}

	if s.AtRest(now) {
		fresh, e := l.Decide(State{}, now, cost)
		if e != d {
			return fail("at rest, but State{} decides %+v", e)
		}
		if d.Code == Allowed && cost > 0 && fresh != next {
			return fail("at rest, but State{} moves to %+v, not %+v", fresh, next)
		}
	}
	return next, d, nil
}

// admission is one admitted charge.
type admission struct {
	at, cost int64
}

// checkBound reports a violation of the bound that l's algorithm promises
// on the admissions of one run whose clock never went back: for every pair
// of admissions i ≤ j, the cost admitted from i to j must be at most
// bound(l, t_j - t_i). It returns "" if there is none.
func checkBound(l Limit, adm []admission) string {
	prefix := make([]int64, len(adm)+1)
	for i, a := range adm {
		prefix[i+1] = prefix[i] + a.cost
	}
	for i := range adm {
		for j := i; j < len(adm); j++ {
			span := adm[j].at - adm[i].at
			if l.Algorithm() == FixedWindow && adm[j].at/l.period != adm[i].at/l.period {
				break // the rest are in later windows
			}
			if l.Algorithm() == SlidingWindow && span >= l.period {
				break // the bound covers intervals up to a period long
			}
			if !withinBound(l, span, prefix[j+1]-prefix[i]) {
				return fmt.Sprintf("%d admitted from %d to %d (%v apart), over the bound", prefix[j+1]-prefix[i], adm[i].at, adm[j].at, time.Duration(span))
			}
		}
	}
	return ""
}

// withinBound reports whether admitting n within an interval of span+1
// nanoseconds (from t to t+span inclusive) keeps l's promise:
//
//   - buckets: n ≤ Capacity + ⌊span·R/P⌋ (the capacity at once, then the
//     rate);
//   - fixed_window, both in one window: n ≤ L;
//   - sliding_window, span < P: n ≤ L + ⌊L·(span+1)/P⌋.
func withinBound(l Limit, span, n int64) bool {
	switch l.Algorithm() {
	case FixedWindow:
		return n <= l.capacity
	case SlidingWindow:
		if span >= l.period {
			return true
		}
		return leq128(uint64(max(n-l.capacity, 0)), uint64(l.period), uint64(l.capacity), uint64(span+1))
	default:
		return leq128(uint64(max(n-l.capacity, 0)), uint64(l.period), uint64(span), uint64(l.requests))
	}
}

// leq128 reports whether a·b ≤ c·d.
func leq128(a, b, c, d uint64) bool {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(c, d)
	return h1 < h2 || h1 == h2 && l1 <= l2
}

// newRand returns a deterministic source for the property tests.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// saturable reports whether an overdraft on l can reach the bound on debt
// without leaving the bucket in debt: a window whose limit is MaxCount, a
// bucket whose capacity span is MaxSpan, a concurrency of MaxInFlight.
// Only then is an overdraft Allowed that Decide would not admit.
func saturable(l Limit) bool {
	if l.alg.usesBurst() {
		return l.spanNs == int64(MaxSpan) && l.spanFrac == 0
	}
	if l.alg == Concurrency {
		return l.capacity == MaxInFlight
	}
	return l.capacity == MaxCount
}

// checkedOp applies o (Decide for Admit, as checkedDecide) to s at now
// and checks the contract of checks, overdraft charges and refunds:
//
//   - the decision reports the bucket as a peek of the state afterwards
//     reports it (so Remaining and ResetAfter keep checkedDecide's
//     contract), RetryAfter only for a denial, Delay only for an admitted
//     queue overdraft;
//   - a check changes nothing, is allowed iff a cost of 1 is admitted, and
//     denied is exactly Decide's denial of a cost of 1;
//   - an overdraft that Decide admits is Decide's; one that it does not is
//     denied (unless the bound on debt is reached), and its RetryAfter is
//     exact for a check: a check then is allowed, 1ns before it is not;
//   - a refund is allowed, and its Remaining is at least the bucket's
//     before and at most that plus the units;
//   - a cost ≤ 0 changes nothing.
func checkedOp(l Limit, s State, now int64, o Kind, cost int64) (State, Decision, error) {
	if o == Admit {
		return checkedDecide(l, s, now, cost)
	}
	next, d := l.Apply(o, s, now, cost)
	now = min(max(now, 0), MaxTime) // as Decide takes it
	fail := func(format string, args ...any) (State, Decision, error) {
		return next, d, fmt.Errorf("%v of %d: %+v: "+format, append([]any{o, cost, d}, args...)...)
	}
	if cost <= 0 && next != s {
		return fail("state changed from %+v to %+v", s, next)
	}
	_, peek, err := checkedDecide(l, next, now, 0)
	if err != nil {
		return fail("a peek afterwards: %v", err)
	}
	if o == Check {
		_, peek = l.Decide(s, now, 0)
	}
	if d.Remaining != peek.Remaining || d.ResetAfter != peek.ResetAfter {
		return fail("a peek of the bucket afterwards reports %+v", peek)
	}
	if d.Code != Denied && d.RetryAfter != 0 {
		return fail("RetryAfter without a denial")
	}
	if d.Delay != 0 && (o != Overdraft || l.alg != LeakyBucketQueue || d.Code != Allowed) {
		return fail("Delay outside an admitted queue overdraft")
	}
	switch o {
	case Check:
		_, one, err := checkedDecide(l, s, now, 1)
		if err != nil {
			return fail("a cost of 1: %v", err)
		}
		if (d.Code == Allowed) != (one.Code == Allowed) || d.Code != Allowed && d != one {
			return fail("a cost of 1 is decided %+v", one)
		}
	case Overdraft:
		if cost <= 0 {
			break
		}
		dn, dd := l.Decide(s, now, cost)
		switch {
		case dd.Code == Allowed && (dn != next || dd != d):
			return fail("Decide admits it as %+v, state %+v", dd, dn)
		case dd.Code != Allowed && d.Code == Allowed && !saturable(l):
			return fail("allowed, but Decide does not admit it: %+v", dd)
		}
		if l.InDebt(next, now) != (d.Code == Denied) {
			return fail("InDebt afterwards says %v", l.InDebt(next, now))
		}
		if d.Code == Denied {
			if d.RetryAfter <= 0 || d.Remaining != 0 {
				return fail("in debt with no wait, or with some remaining")
			}
			if retry := now + int64(d.RetryAfter); retry <= MaxTime {
				if e := l.Check(next, retry); e.Code != Allowed {
					return fail("a check after RetryAfter: %+v", e)
				}
				if e := l.Check(next, retry-1); e.Code != Denied {
					return fail("a check 1ns before RetryAfter: %+v", e)
				}
			}
		}
	case Refund:
		if d.Code != Allowed {
			return fail("a refund not allowed")
		}
		if _, before := l.Decide(s, now, 0); d.Remaining < before.Remaining || cost > 0 && d.Remaining-before.Remaining > cost {
			return fail("Remaining was %d before", before.Remaining)
		}
	}
	return next, d, nil
}
