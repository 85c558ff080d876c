package algorithms

import (
	"math"
	"testing"
	"time"
)

// Each algorithm's fuzz target decodes a limit, a start time and a
// timeline of requests, and checks every decision against the contract
// (checkedDecide), going back in time against later times, and what is
// admitted against the algorithm's bound over every stretch where the
// clock did not go back. `go test` runs the seed corpus only; fuzz with
//
//	go test -run '^$' -fuzz '^FuzzTokenBucket$' -fuzztime 15s -fuzzminimizetime 5s ./internal/core/algorithms/
//
// (a short -fuzzminimizetime: minimizing a long timeline by the default
// 60s would take a brief run's whole budget).

func FuzzFixedWindow(f *testing.F)      { fuzzAlgorithm(f, FixedWindow) }
func FuzzSlidingWindow(f *testing.F)    { fuzzAlgorithm(f, SlidingWindow) }
func FuzzTokenBucket(f *testing.F)      { fuzzAlgorithm(f, TokenBucket) }
func FuzzLeakyBucket(f *testing.F)      { fuzzAlgorithm(f, LeakyBucket) }
func FuzzLeakyBucketQueue(f *testing.F) { fuzzAlgorithm(f, LeakyBucketQueue) }
func FuzzConcurrency(f *testing.F)      { fuzzAlgorithm(f, Concurrency) }

// fuzzOp is the size of one request in the fuzz input: a selector byte, a
// 16-bit value and a byte for how the charge is applied. The selector's
// low 3 bits pick the cost, the next 3 the step of the clock, and its top
// bit lets two of those steps go back; the last byte picks an admit, a
// check, an overdraft charge or a refund, and a larger cost for the last
// two, up to MaxInt64 (see fuzzTimeline).
const fuzzOp = 4

func fuzzAlgorithm(f *testing.F, alg Algorithm) {
	rng := newRand(uint64(alg))
	// ops returns n random requests; the clock goes back only if back.
	ops := func(n int, back bool) []byte {
		b := make([]byte, n*fuzzOp)
		for i := range b {
			b[i] = byte(rng.Uint32())
			if i%fuzzOp == 0 && !back {
				b[i] &^= 0x80
			}
		}
		return b
	}
	for _, back := range []bool{false, true} {
		f.Add(uint32(7), int64(3*time.Second), uint32(4), t0, ops(200, back))
		f.Add(uint32(3), int64(10), uint32(5), int64(0), ops(200, back))
		f.Add(uint32(1), int64(day), uint32(1), t0, ops(100, back))
		f.Add(uint32(1e9), int64(time.Second), uint32(1e9), t0, ops(100, back))
		f.Add(uint32(MaxRequests), int64(MaxSpan), uint32(MaxRequests), MaxTime-int64(time.Hour), ops(100, back))
		f.Add(uint32(MaxRequests), int64(1), uint32(0), int64(1)<<40, ops(100, back))
		f.Add(uint32(100), int64(100), uint32(100), t0, ops(300, back))
		f.Add(uint32(7), int64(3*time.Microsecond), uint32(4), t0, ops(300, back))
		f.Add(uint32(12), int64(40), uint32(3), t0, ops(300, back))
		// Periods shorter than twice the limit: a sliding window's weight
		// decays by whole requests per nanosecond.
		f.Add(uint32(3), int64(4), uint32(2), t0, ops(300, back))
		f.Add(uint32(5), int64(7), uint32(9), t0+3, ops(300, back))
	}

	f.Fuzz(func(t *testing.T, requests uint32, period int64, burst uint32, start int64, in []byte) {
		maxPeriod := int64(MaxSpan)
		if alg == SlidingWindow {
			maxPeriod /= 2
		}
		if alg == Concurrency {
			maxPeriod = int64(MaxLease)
		}
		if alg == Concurrency {
			requests = 1 + requests%MaxInFlight
		}
		if period < 0 {
			period = -(period + 1)
		}
		period = 1 + period%maxPeriod
		if !alg.usesBurst() {
			burst = 0
		}
		l, err := NewLimit(alg, max(int64(requests), 1), time.Duration(period), int64(burst))
		if err != nil {
			return // a bucket that drains too slowly
		}
		if start < 0 {
			start = -(start + 1)
		}
		fuzzTimeline(t, l, start%(MaxTime+1), in)
	})
}

// fuzzTimeline decides the requests that in encodes, starting at now.
// Until the clock first goes back, each decision must also agree with the
// model.
func fuzzTimeline(t *testing.T, l Limit, now int64, in []byte) {
	capacity, p := l.Capacity(), l.period
	interval := max(p/l.requests, 1)
	var (
		s       State
		latest  = now
		segment []admission // since the clock last went back
		m       = newModel(l)
	)
	if len(in) > 300*fuzzOp {
		in = in[:300*fuzzOp]
	}
	for i := 0; i+fuzzOp <= len(in); i += fuzzOp {
		sel, v, how := in[i], int64(in[i+1])<<8|int64(in[i+2]), in[i+3]
		var cost int64
		switch sel & 7 {
		case 0:
			cost = 0
		case 1, 6:
			cost = 1
		case 2:
			cost = 2
		case 3:
			cost = capacity
		case 4:
			cost = capacity + 1
		case 5:
			cost = 1 + v%capacity
		case 7:
			cost = -1 // a peek too
		}
		o := [8]Kind{Admit, Admit, Admit, Admit, Check, Overdraft, Overdraft, Refund}[how&7]
		if (o == Overdraft || o == Refund) && how&8 != 0 {
			if cost = v << (how >> 4 * 3); how>>4 == 15 {
				cost = math.MaxInt64
			}
		}
		var dt int64
		kind := sel >> 3 & 7
		if sel&0x80 == 0 && (kind == 5 || kind == 6) {
			kind -= 2 // forward instead
		}
		switch kind {
		case 1: // around the emission interval
			dt = v % (4*min(interval, 1<<40) + 1)
		case 2: // a few nanoseconds
			dt = v % 64
		case 3: // up to a period
			dt = (p>>10)*(v&0x3ff) + v>>10
		case 4: // just past the next window's start
			dt = p - now%p + v%16
		case 5: // back (forward without the top bit)
			dt = -(v % (2*min(p, 1<<60) + 1))
		case 6:
			dt = -(p>>10)*(v&0x3ff) - v>>10
		case 7: // idle, up to two years
			dt = v << 40
		}
		switch { // now += dt within [0, MaxTime]
		case dt > MaxTime-now:
			now = MaxTime
		case dt < -now:
			now = 0
		default:
			now += dt
		}
		if now < latest {
			if msg := checkBound(l, segment); msg != "" {
				t.Fatal(msg)
			}
			segment = segment[:0]
			m = nil
		}

		next, d, err := checkedOp(l, s, now, o, cost)
		if err != nil {
			t.Fatalf("%v at %d, cost %d, state %+v: %v", l.Algorithm(), now, cost, s, err)
		}
		if m != nil {
			want := apply(m, o, now, cost)
			if l.Algorithm() == FixedWindow || l.Algorithm() == SlidingWindow {
				want.ResetAfter, want.RetryAfter = d.ResetAfter, d.RetryAfter
			}
			if d != want {
				t.Fatalf("%v at %d, cost %d, state %+v:\n got %+v\nmodel %+v", l.Algorithm(), now, cost, s, d, want)
			}
		}
		if now < latest && (o == Admit || o == Check) {
			_, dl := l.Decide(s, latest, cost)
			if o == Check {
				dl = l.Check(s, latest)
			}
			_, peek := l.Decide(s, now, 0)
			_, peekl := l.Decide(s, latest, 0)
			if d.Code == Allowed && dl.Code != Allowed || peek.Remaining > peekl.Remaining {
				t.Fatalf("%v at %d, %v of %d, state %+v: %+v (remaining %d) but at the later %d: %+v (remaining %d)",
					l.Algorithm(), now, o, cost, s, d, peek.Remaining, latest, dl, peekl.Remaining)
			}
		}
		switch {
		case o == Refund && next != s:
			// What was given back may be admitted again: the bound holds
			// from here on.
			if msg := checkBound(l, segment); msg != "" {
				t.Fatal(msg)
			}
			segment = segment[:0]
		case o == Admit && d.Code == Allowed && cost > 0:
			segment = append(segment, admission{now, cost})
		case o == Overdraft && cost > 0:
			// An overdraft that fits is admitted as an admit is; one into
			// debt only leaves less to admit (and one that saturates at
			// the bound on debt counts less than its cost).
			if _, dd := l.Decide(s, now, cost); dd.Code == Allowed {
				segment = append(segment, admission{now, cost})
			}
		}
		latest = max(latest, now)
		s = next
	}
	if msg := checkBound(l, segment); msg != "" {
		t.Fatal(msg)
	}
}

// FuzzForeignState decides from arbitrary States, as a State of another
// Limit is after a rule changed: the answers are unspecified, but Decide,
// Check, Overdraft and Refund must not panic and Remaining must stay
// within [0, Capacity].
func FuzzForeignState(f *testing.F) {
	f.Add(uint8(TokenBucket), uint32(7), int64(3*time.Second), int64(1<<62), int64(-1), uint32(1<<31), uint32(5), t0, int64(1))
	f.Add(uint8(SlidingWindow), uint32(1), int64(1), int64(0), int64(1<<63-1), uint32(1<<32-1), uint32(1<<32-1), int64(0), int64(1))
	f.Add(uint8(FixedWindow), uint32(10), int64(time.Minute), t0, t0+int64(time.Hour), uint32(7), uint32(0), t0, int64(3))
	// A window's state under a concurrency of 1ns: its restAt is far past
	// the concurrency's slots.
	f.Add(uint8(Concurrency), uint32(3), int64(1), t0+int64(time.Minute), t0, uint32(2), uint32(0), t0, int64(1))
	f.Fuzz(func(t *testing.T, alg uint8, requests uint32, period, restAt, at int64, n, m uint32, now, cost int64) {
		l, err := NewLimit(Algorithm(alg), int64(requests), time.Duration(period), 0)
		if err != nil {
			return
		}
		s := State{restAt: restAt, t: at, n: n, m: m}
		_, d := l.Decide(s, now, cost)
		if d.Remaining < 0 || d.Remaining > l.Capacity() {
			t.Fatalf("Decide(%+v, %d, %d) = %+v: Remaining outside [0, %d]", s, now, cost, d, l.Capacity())
		}
		_, o := l.Overdraft(s, now, cost)
		_, r := l.Refund(s, now, cost)
		for _, d := range []Decision{l.Check(s, now), o, r} {
			if d.Remaining < 0 || d.Remaining > l.Capacity() {
				t.Fatalf("a check, overdraft or refund of %+v at %d (cost %d): %+v: Remaining outside [0, %d]", s, now, cost, d, l.Capacity())
			}
		}
	})
}
