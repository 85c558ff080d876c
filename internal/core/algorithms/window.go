package algorithms

import (
	"math/bits"
	"time"
)

// fixedWindow decides FixedWindow. The state holds the start of the window
// last charged (t) and its count (n).
//
// Windows are [k·P, (k+1)·P). Once now is in a later window than s.t's, the
// count starts over at 0. A now in an earlier window than s.t's (a clock
// that went back) is settled in s.t's window with its count: the window
// ends no sooner and the count is no lower than they were.
func (l *Limit) fixedWindow(s State, now, cost int64) (State, Decision) {
	start := now - now%l.period
	count := int64(s.n)
	if start > s.t {
		count = 0
	} else {
		start = s.t
	}
	end := start + l.period

	var d Decision
	if count > 0 {
		d.ResetAfter = time.Duration(end - now)
	}
	switch {
	case cost <= 0 || cost > l.capacity:
		d.Remaining = max(l.capacity-count, 0)
		if cost > 0 {
			d.Code = OverCapacity
		}
		return s, d
	case count+cost > l.capacity:
		// count > 0 here; the count starts over when the window ends.
		d.Code = Denied
		d.Remaining = max(l.capacity-count, 0)
		d.RetryAfter = time.Duration(end - now)
		return s, d
	}
	count += cost
	d.Remaining = l.capacity - count
	d.ResetAfter = time.Duration(end - now)
	return State{restAt: end, t: start, n: uint32(count)}, d
}

// slidingWindow decides SlidingWindow. The state holds the start S of the
// window last charged (t), its count (n) and the previous window's (m).
//
// At now = S + e in window [S, S+P), the hits in the interval (now-P, now]
// are estimated as m·(P-e)/P + n: the previous window's count weighted by
// its overlap with that interval. A charge is admitted iff the estimate
// with it is at most L = Requests, computed exactly as
// m·(P-e) + (n+cost)·P ≤ L·P in 128 bits.
//
// A now in an earlier window than S (a clock that went back) is settled in
// S's window with e = 0: the previous count weighs the most it can.
func (l *Limit) slidingWindow(s State, now, cost int64) (State, Decision) {
	p := l.period
	start := now - now%p
	cur, prev := int64(s.n), int64(s.m)
	var e int64 // now - start, or 0 when the clock went back
	switch {
	case start <= s.t:
		start = s.t
		e = max(now-start, 0)
	case uint64(start)-uint64(s.t) < 2*uint64(p): // the next window
		prev, cur = cur, 0
		e = now - start
	default: // two or more windows later
		prev, cur = 0, 0
		e = now - start
	}

	// w = prev·(P-e), the previous window's weight times P.
	wHi, wLo := bits.Mul64(uint64(prev), uint64(p-e))

	var d Decision
	switch {
	case cur > 0:
		d.ResetAfter = time.Duration(start + 2*p - now)
	case prev > 0:
		d.ResetAfter = time.Duration(start + p - now)
	}
	if cost <= 0 || cost > l.capacity {
		d.Remaining = l.slidingRemaining(cur, prev, e, wHi, wLo)
		if cost > 0 {
			d.Code = OverCapacity
		}
		return s, d
	}

	// Admitted iff w ≤ k·P with k = L - cur - cost.
	k := l.capacity - cur - cost
	kHi, kLo := bits.Mul64(uint64(max(k, 0)), uint64(p))
	if k < 0 || wHi > kHi || wHi == kHi && wLo > kLo {
		d.Code = Denied
		d.Remaining = l.slidingRemaining(cur, prev, e, wHi, wLo)
		d.RetryAfter = time.Duration(l.slidingRetry(start, now, cur, prev, k, cost))
		return s, d
	}
	cur += cost
	d.Remaining = l.slidingRemaining(cur, prev, e, wHi, wLo)
	d.ResetAfter = time.Duration(start + 2*p - now)
	return State{restAt: start + 2*p, t: start, n: uint32(cur), m: uint32(prev)}, d
}

// slidingRemaining returns how many charges of cost 1 fit now: the largest
// whole r with w + (cur+r)·P ≤ L·P, that is L - cur - ceil(w/P), or 0.
func (l *Limit) slidingRemaining(cur, prev, e int64, wHi, wLo uint64) int64 {
	weight := prev // ceil(w/P) = ceil(prev·(P-e)/P), prev when e = 0
	if e > 0 && prev > 0 {
		// w/P < prev, so the quotient fits.
		q, rem := bits.Div64(wHi, wLo, uint64(l.period))
		weight = int64(q)
		if rem != 0 {
			weight++
		}
	}
	return max(l.capacity-cur-weight, 0)
}

// slidingRetry returns the least wait after which cost is admitted, given
// that it is denied now, in window start with counts cur and prev, and
// k = L - cur - cost.
func (l *Limit) slidingRetry(start, now, cur, prev, k, cost int64) int64 {
	p := uint64(l.period)
	if k >= 0 && prev > 0 {
		// Later in this window, at the least e' with prev·(P-e') ≤ k·P:
		// e' = P - floor(k·P/prev). Being denied, k·P < prev·(P-e) ≤
		// prev·P, so the quotient is below P and fits.
		hi, lo := bits.Mul64(uint64(k), p)
		if q, _ := bits.Div64(hi, lo, uint64(prev)); q > 0 {
			return start + l.period - int64(q) - now
		}
	}
	// In the next window, where the counts are (cur, 0), at the least e''
	// with cur·(P-e'') ≤ (L-cost)·P: P - floor((L-cost)·P/cur), or 0 when
	// cur ≤ L-cost. When cost = L that is P: the window after next.
	var e2 int64
	if room := l.capacity - cost; cur > room {
		// room/cur < 1, so the quotient is below P and fits.
		hi, lo := bits.Mul64(uint64(room), p)
		q, _ := bits.Div64(hi, lo, uint64(cur))
		e2 = l.period - int64(q)
	}
	return start + l.period + e2 - now
}
