package algorithms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

const driftDecisions = 1_000_000

// A bucket at 7 per 3s (interval 428,571,428 4/7 ns: not a whole number of
// nanoseconds) with burst 4, asked for 1 at least every interval, admits
// exactly 4 + ⌊elapsed·7/3s⌋ by the last request (as long as requests
// outnumber tokens): no drift after a million decisions, whatever the
// spacing. At 7 per 3µs the 4/7ns that rounding would lose per admission
// would add up to hundreds of tokens.
func TestBucketsDoNotDrift(t *testing.T) {
	tests := []struct {
		alg    Algorithm
		period time.Duration // for 7 requests
		step   int64         // between requests, at most the interval
	}{
		{TokenBucket, 3 * time.Second, int64(time.Millisecond)},
		{TokenBucket, 3 * time.Second, 299_999_989},
		{TokenBucket, 3 * time.Second, 3_000_017},
		{TokenBucket, 3 * time.Microsecond, 100},
		{TokenBucket, 3 * time.Microsecond, 427},
		{LeakyBucket, 3 * time.Second, 299_999_989},
		{LeakyBucket, 3 * time.Microsecond, 100},
		{LeakyBucketQueue, 3 * time.Second, 299_999_989},
		{LeakyBucketQueue, 3 * time.Microsecond, 100},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/7 per %v/every %v", tt.alg, tt.period, time.Duration(tt.step)), func(t *testing.T) {
			l := mustLimit(t, tt.alg, 7, tt.period, 4)
			start := t0 + 123_456_789
			var s State
			var d Decision
			admitted := int64(0)
			for i := range int64(driftDecisions) {
				if s, d = l.Decide(s, start+i*tt.step, 1); d.Code == Allowed {
					admitted++
				}
			}
			elapsed := (driftDecisions - 1) * tt.step
			want := 4 + elapsed*7/int64(tt.period)
			if admitted != want {
				t.Errorf("admitted %d in %v, want 4 + ⌊%d·7/%v⌋ = %d", admitted, time.Duration(elapsed), elapsed, tt.period, want)
			}
		})
	}
}

// Fixed windows admit exactly L in every window, however many decisions.
func TestFixedWindowDoesNotDrift(t *testing.T) {
	l := mustLimit(t, FixedWindow, 7, 3*time.Second, 0)
	start := t0 + 1_234_567
	step := int64(time.Millisecond) + 7
	var s State
	var d Decision
	admitted := map[int64]int64{}
	asked := map[int64]int64{}
	for i := range int64(driftDecisions) {
		now := start + i*step
		w := now / l.period
		asked[w]++
		if s, d = l.Decide(s, now, 1); d.Code == Allowed {
			admitted[w]++
		}
	}
	for w, n := range asked {
		if want := min(n, 7); admitted[w] != want {
			t.Fatalf("window %d: %d asked, %d admitted, want %d", w, n, admitted[w], want)
		}
	}
	if len(asked) < 300 {
		t.Fatalf("only %d windows touched", len(asked))
	}
}

// A concurrency charged and released a million times — about 90 leases,
// at a step that is no divisor of its generation, with a tenth fewer
// releases than charges (callers that crashed) — holds exactly the model's count
// in flight at every decision: releases, expiries and the generations'
// shifts lose no unit and invent none.
func TestConcurrencyDoesNotDrift(t *testing.T) {
	l := mustLimit(t, Concurrency, 20, 11*time.Second, 0) // G = 1,833,333,334ns
	m := &concurrencyModel{l: l}
	rng := rand.New(rand.NewPCG(11, 20))
	start := t0 + 123_456_789
	const step = 1_000_003 // ns
	var s State
	var d Decision
	admitted, released := 0, 0
	for i := range int64(driftDecisions) {
		now := start + i*step
		var want Decision
		switch r := rng.IntN(20); {
		case r < 10:
			want = m.decide(now, 1)
			if s, d = l.Decide(s, now, 1); d.Code == Allowed {
				admitted++
			}
		case r < 19:
			want = m.refund(now, 1)
			s, d = l.Refund(s, now, 1)
			released++
		default:
			want = m.check(now)
			d = l.Check(s, now)
		}
		if d != want {
			t.Fatalf("decision %d at %v: got %+v, want the model's %+v", i, time.Duration(now-start), d, want)
		}
	}
	end := start + (driftDecisions-1)*step
	if got, want := l.capacity-l.Check(s, end).Remaining, m.live(end); got != want {
		t.Errorf("%d in flight at the end, the model %d", got, want)
	}
	if admitted < driftDecisions/4 || released < driftDecisions/4 {
		t.Errorf("%d admitted, %d released: the timeline did not exercise both", admitted, released)
	}
}
