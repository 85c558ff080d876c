package algorithms

import (
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"
)

// usageCost draws the cost of a check, overdraft charge or refund: mostly
// near the capacity, sometimes far past it, up to MaxInt64.
func (a arrivals) usageCost() int64 {
	c := a.l.capacity
	switch x := a.rng.IntN(100); {
	case x < 5:
		return 0
	case x < 40:
		return 1 + a.rng.Int64N(min(c, 3))
	case x < 70:
		return 1 + a.rng.Int64N(c)
	case x < 85:
		return c + 1 + a.rng.Int64N(2*c)
	case x < 95:
		return 1 + a.rng.Int64N(math.MaxInt64>>a.rng.IntN(63))
	default:
		return math.MaxInt64
	}
}

// On random timelines of admits, checks, overdraft charges (into debt, up
// to its bound) and refunds, whose clock never goes back, every decision
// keeps the contract (checkedOp) and agrees with the slow models.
func TestRandomUsage(t *testing.T) {
	const steps = 2000
	for _, alg := range Algorithms() {
		for i, spec := range specs(alg) {
			t.Run(fmt.Sprintf("%v/%d per %v burst %d", alg, spec.requests, spec.period, spec.burst), func(t *testing.T) {
				l := mustLimit(t, alg, spec.requests, spec.period, spec.burst)
				gen := arrivals{newRand(uint64(alg)<<8 | uint64(i) | 2<<16), l}
				m := newModel(l)
				var (
					s      State
					now    = t0 + gen.rng.Int64N(int64(day))
					counts [4][3]int
				)
				for n := range steps {
					now += gen.gap()
					o := Kind(gen.rng.IntN(4))
					cost := gen.cost()
					if o == Overdraft || o == Refund {
						cost = gen.usageCost()
					}
					next, d, err := checkedOp(l, s, now, o, cost)
					if err != nil {
						t.Fatalf("decision %d (now %d): %v", n, now, err)
					}
					want := apply(m, o, now, cost)
					if alg == FixedWindow || alg == SlidingWindow {
						want.ResetAfter, want.RetryAfter = d.ResetAfter, d.RetryAfter
					}
					if d != want {
						t.Fatalf("decision %d (now %d, %v of %d):\n got %+v\nmodel %+v", n, now, o, cost, d, want)
					}
					counts[o][d.Code]++
					s = next
				}
				// An overdraft on a limit of MaxCount per window saturates
				// at the limit: never in debt.
				if counts[Check][Denied] == 0 || counts[Overdraft][Denied] == 0 && !saturable(l) || counts[Refund][Allowed] == 0 {
					t.Errorf("timeline too tame: %v (admit, check, overdraft, refund: allowed, denied, over capacity)", counts)
				}
			})
		}
	}
}

// The decisions a user sees on a token budget charged after the fact, as
// Envoy Gateway sends them: a check (cost 1 without charging) on the
// request path, the tokens used when the stream ends.
func TestUsageTable(t *testing.T) {
	// 1,000 tokens a minute.
	const minute = int64(time.Minute)
	type step struct {
		at   int64 // after t0
		op   Kind
		cost int64
		want Decision
	}
	tests := []struct {
		name  string
		alg   Algorithm
		burst int64
		steps []step
	}{
		{
			name: "fixed window: 200 in debt until the window ends",
			alg:  FixedWindow,
			steps: []step{
				{0, Check, 0, Decision{Remaining: 1000}},
				{1, Overdraft, 1200, Decision{Code: Denied, Debt: 200, ResetAfter: time.Duration(minute - 1), RetryAfter: time.Duration(minute - 1)}},
				{2, Check, 0, Decision{Code: Denied, Debt: 200, ResetAfter: time.Duration(minute - 2), RetryAfter: time.Duration(minute - 2)}},
				{3, Admit, 1, Decision{Code: Denied, Debt: 200, ResetAfter: time.Duration(minute - 3), RetryAfter: time.Duration(minute - 3)}},
				{4, Refund, 150, Decision{Debt: 50, ResetAfter: time.Duration(minute - 4)}},
				{5, Refund, 100, Decision{Remaining: 50, ResetAfter: time.Duration(minute - 5)}},
				{6, Admit, 50, Decision{ResetAfter: time.Duration(minute - 6)}},
				{minute, Check, 0, Decision{Remaining: 1000}},
			},
		},
		{
			name: "token bucket: the debt is paid back at the rate",
			alg:  TokenBucket,
			steps: []step{
				{0, Overdraft, 1200, Decision{Code: Denied, Debt: 200, ResetAfter: 72 * time.Second, RetryAfter: 12*time.Second + 60*time.Millisecond}},
				// 200 in debt: 12s until 0 tokens, 60ms more for one.
				{int64(12 * time.Second), Check, 0, Decision{Code: Denied, ResetAfter: 60 * time.Second, RetryAfter: 60 * time.Millisecond}},
				{int64(12*time.Second + 60*time.Millisecond), Check, 0, Decision{Remaining: 1, ResetAfter: 60*time.Second - 60*time.Millisecond}},
				// A refund of all 1,200 is back at rest, never past it.
				{int64(12*time.Second + 60*time.Millisecond), Refund, 1200, Decision{Remaining: 1000}},
				{int64(13 * time.Second), Overdraft, 999, Decision{Remaining: 1, ResetAfter: 59940 * time.Millisecond}},
				// The bound on debt: (MaxSpan-60s)·1000/60s, rounded up.
				{int64(13 * time.Second), Overdraft, math.MaxInt64, Decision{Code: Denied, Debt: 76861432641, ResetAfter: MaxSpan, RetryAfter: MaxSpan - 60*time.Second + 60*time.Millisecond}},
			},
		},
		{
			name: "sliding window: the debt is weighed out with its window",
			alg:  SlidingWindow,
			steps: []step{
				{0, Overdraft, 1500, Decision{Code: Denied, Debt: 500, ResetAfter: time.Duration(2 * minute), RetryAfter: 80*time.Second + 40*time.Millisecond}},
				// In the next window, 1500·(P-e)/P ≤ 999 at e ≥ 501P/1500 = 20.04s.
				{int64(80*time.Second + 40*time.Millisecond), Check, 0, Decision{Remaining: 1, ResetAfter: 39*time.Second + 960*time.Millisecond}},
				// Units come back off the current window's count first, then
				// the previous one's.
				{minute + minute/2, Admit, 10, Decision{Remaining: 240, ResetAfter: time.Duration(minute + minute/2)}},
				{minute + minute/2, Refund, 510, Decision{Remaining: 500, ResetAfter: time.Duration(minute / 2)}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustLimit(t, tt.alg, 1000, time.Minute, tt.burst)
			var s State
			for i, st := range tt.steps {
				next, d, err := checkedOp(l, s, t0+st.at, st.op, st.cost)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d != st.want {
					t.Fatalf("step %d (%v of %d at %v):\n got %+v\nwant %+v", i, st.op, st.cost, time.Duration(st.at), d, st.want)
				}
				s = next
			}
		})
	}
}

// Overdraft at any cost, MaxInt64 included, on the extreme limits and at
// the extreme times never overflows: the backlog of a bucket stops at
// MaxSpan, a window's count at MaxCount, and every decision keeps the
// contract.
func TestDebtBound(t *testing.T) {
	limits := []limitSpec{
		{1, MaxSpan, 1},
		{MaxRequests, 1, MaxRequests},
		{MaxRequests, MaxSpan / 2, 1},
		{7, 3 * sec, 4},
		{1, ns, 1},
	}
	for _, alg := range Algorithms() {
		for _, spec := range limits {
			if !alg.usesBurst() {
				spec.burst = 0
			}
			l, err := NewLimit(alg, spec.requests, spec.period, spec.burst)
			if err != nil {
				continue // a sliding window of MaxSpan
			}
			for _, now := range []int64{0, t0, MaxTime - 1, MaxTime} {
				t.Run(fmt.Sprintf("%v/%d per %v burst %d at %d", alg, spec.requests, spec.period, spec.burst, now), func(t *testing.T) {
					var s State
					total := new(big.Int)
					for i, cost := range []int64{math.MaxInt64, 1, math.MaxInt64, l.capacity} {
						next, d, err := checkedOp(l, s, now, Overdraft, cost)
						if err != nil {
							t.Fatalf("overdraft %d: %v", i, err)
						}
						// The backlog of a bucket is the total charged times
						// P/R, up to MaxSpan.
						total.Add(total, big.NewInt(cost))
						backlog := new(big.Rat).SetFrac(new(big.Int).Mul(total, big.NewInt(l.period)), big.NewInt(l.requests))
						want := MaxSpan
						if backlog.Cmp(big.NewRat(int64(MaxSpan), 1)) < 0 {
							want = time.Duration(ratCeil(backlog))
						}
						if alg.usesBurst() && d.ResetAfter != want {
							t.Fatalf("overdraft %d of %d: ResetAfter %v, want %v", i, cost, d.ResetAfter, want)
						}
						if alg == Concurrency {
							if g := unpackGens(next); g[0] != MaxInFlight {
								t.Fatalf("overdraft %d of %d: now's generation holds %d, want the bound, MaxInFlight", i, cost, g[0])
							}
						} else if !alg.usesBurst() && next.n != MaxCount {
							t.Fatalf("overdraft %d of %d: count %d, want the bound, MaxCount", i, cost, next.n)
						}
						s = next
					}
					if _, _, err := checkedOp(l, s, now, Check, 0); err != nil {
						t.Fatal(err)
					}
					// Refunds of all that was charged leave the bucket at
					// rest (and past the bound, sooner).
					var d Decision
					for i, units := range []int64{math.MaxInt64, 1, math.MaxInt64, l.capacity} {
						if s, d, err = checkedOp(l, s, now, Refund, units); err != nil {
							t.Fatalf("refund %d: %v", i, err)
						}
					}
					if s != (State{}) || d.Remaining != l.capacity {
						t.Fatalf("the refunds leave %+v, %+v; want the bucket at rest", s, d)
					}
				})
			}
		}
	}
}

// A refund of what an overdraft charged, at the same instant, gives the
// bucket back exactly as it was (below the bound on debt).
// Not for concurrency, whose refund releases the oldest units in flight,
// not the ones just charged (TestConcurrencyReleasesOldest).
func TestRefundUndoesOverdraft(t *testing.T) {
	for _, alg := range Algorithms() {
		if alg == Concurrency {
			continue
		}
		for i, spec := range specs(alg) {
			l := mustLimit(t, alg, spec.requests, spec.period, spec.burst)
			if saturable(l) {
				continue
			}
			gen := arrivals{newRand(uint64(alg)<<8 | uint64(i) | 3<<16), l}
			var s State
			now := t0
			for n := range 500 {
				now += gen.gap()
				s, _ = l.Overdraft(s, now, gen.cost())
				cost := 1 + gen.rng.Int64N(3*l.capacity)
				charged, _ := l.Overdraft(s, now, cost)
				if charged.n == MaxCount && !alg.usesBurst() || charged.t-now == int64(MaxSpan) {
					continue // at the bound on debt, the overdraft took less than cost
				}
				back, got := l.Refund(charged, now, cost)
				_, want := l.Decide(s, now, 0)
				if got != want {
					t.Fatalf("%v: step %d: an overdraft of %d refunded reports %+v, want %+v", alg, n, cost, got, want)
				}
				for _, later := range []int64{now, now + 1 + gen.rng.Int64N(2*l.period)} {
					if _, a := l.Decide(back, later, 0); a != func() Decision { _, b := l.Decide(s, later, 0); return b }() {
						t.Fatalf("%v: step %d: refunded state decides %+v at %d, unlike before", alg, n, a, later)
					}
				}
				// Pay it back now and then, so that the bucket is not always in debt.
				if n%3 == 0 {
					s, _ = l.Refund(s, now, gen.usageCost())
				}
			}
		}
	}
}

// changed returns a limit a reload may put over l's buckets: the same
// period and kind of state (the same window; any of the buckets), any
// requests and capacity.
func (a arrivals) changed() Limit {
	for {
		alg := a.l.alg
		if alg.usesBurst() {
			alg = [...]Algorithm{TokenBucket, LeakyBucket, LeakyBucketQueue}[a.rng.IntN(3)]
		}
		requests := 1 + a.rng.Int64N(min(4*a.l.requests, MaxRequests))
		var burst int64
		if alg.usesBurst() && a.rng.IntN(2) == 0 {
			burst = 1 + a.rng.Int64N(min(4*requests, MaxRequests))
		}
		if l, err := NewLimit(alg, requests, time.Duration(a.l.period), burst); err == nil {
			return l
		}
	}
}

// On random timelines of every operation whose limit changes now and then
// (as reloads change it: another rate and capacity over the same period),
// every decision keeps the contract — its RetryAfter and ResetAfter come
// true, the old rate draining until a charge writes the bucket — and
// agrees with the slow models, which keep what was used: the counts, the
// level.
func TestChangedLimits(t *testing.T) {
	const steps = 3000
	for _, alg := range Algorithms() {
		for i, spec := range specs(alg) {
			t.Run(fmt.Sprintf("%v/%d per %v burst %d", alg, spec.requests, spec.period, spec.burst), func(t *testing.T) {
				first := mustLimit(t, alg, spec.requests, spec.period, spec.burst)
				gen := arrivals{newRand(uint64(alg)<<8 | uint64(i) | 3<<16), first}
				m := newModel(first)
				var (
					s       State
					now     = t0 + gen.rng.Int64N(int64(day))
					changes int
					counts  [4][3]int
				)
				for n := range steps {
					if gen.rng.IntN(40) == 0 {
						gen.l = gen.changed()
						m.changeTo(gen.l)
						changes++
					}
					l := gen.l
					now += gen.gap()
					o := Kind(gen.rng.IntN(4))
					cost := gen.cost()
					if o == Overdraft || o == Refund {
						cost = gen.usageCost()
					}
					next, d, err := checkedOp(l, s, now, o, cost)
					if err != nil {
						t.Fatalf("decision %d (now %d, limit %d per %v burst %d): %v", n, now, l.requests, l.Period(), l.Burst(), err)
					}
					want := apply(m, o, now, cost)
					if alg == FixedWindow || alg == SlidingWindow {
						want.ResetAfter, want.RetryAfter = d.ResetAfter, d.RetryAfter
					}
					if d != want {
						t.Fatalf("decision %d (now %d, %v of %d, limit %v %d per %v burst %d):\n got %+v\nmodel %+v",
							n, now, o, cost, l.alg, l.requests, l.Period(), l.Burst(), d, want)
					}
					counts[o][d.Code]++
					s = next
				}
				if changes == 0 || counts[Admit][Allowed] == 0 || counts[Admit][Denied] == 0 {
					t.Errorf("timeline too tame: %d changes, %v", changes, counts)
				}
			})
		}
	}
}
