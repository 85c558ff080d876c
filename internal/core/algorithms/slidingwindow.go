package algorithms

import (
	"math/bits"
	"time"
)

// This file is SlidingWindow's arithmetic: its decision (slidingWindow,
// which Decide calls) and its usage operations (Check, Overdraft, Refund).
// The Redis store's Lua mirrors it function for function in the section
// headed "slidingwindow.go" of internal/store/redis/fast.lua (plain
// numbers) and of decide.lua (bignums).

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
		d.Remaining, d.Debt = remainingDebt(l.slidingLeft(cur, prev, e, wHi, wLo))
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
		d.Remaining, d.Debt = remainingDebt(l.slidingLeft(cur, prev, e, wHi, wLo))
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
	return max(l.slidingLeft(cur, prev, e, wHi, wLo), 0)
}

// slidingLeft returns L - cur - ceil(w/P): the Remaining when it is at
// least 0, else minus the Debt (the estimate cur + w/P beyond L, rounded
// up).
func (l *Limit) slidingLeft(cur, prev, e int64, wHi, wLo uint64) int64 {
	weight := prev // ceil(w/P) = ceil(prev·(P-e)/P), prev when e = 0
	if e > 0 && prev > 0 {
		// w/P < prev, so the quotient fits.
		q, rem := bits.Div64(wHi, wLo, uint64(l.period))
		weight = int64(q)
		if rem != 0 {
			weight++
		}
	}
	return l.capacity - cur - weight
}

// remainingDebt splits a signed left (slidingLeft) into a Decision's
// Remaining and Debt.
func remainingDebt(left int64) (remaining, debt int64) {
	return max(left, 0), max(-left, 0)
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

// slidingAt returns the window that s settles now in, its count, the
// previous window's and e = now - start (0 for a clock that went back), as
// slidingWindow settles them.
func (l *Limit) slidingAt(s State, now int64) (start, cur, prev, e int64) {
	p := l.period
	start = now - now%p
	cur, prev = int64(s.n), int64(s.m)
	switch {
	case start <= s.t:
		return s.t, cur, prev, max(now-s.t, 0)
	case uint64(start)-uint64(s.t) < 2*uint64(p): // the next window
		return start, 0, cur, now - start
	}
	return start, 0, 0, now - start
}

// slidingReport is the decision reporting counts cur and prev in window
// start at now: Remaining, ResetAfter and, when a cost of extra more does
// not fit (extra 0: the estimate above Requests, in debt; 1: a check),
// Denied with the RetryAfter of a cost of 1.
func (l *Limit) slidingReport(start, cur, prev, e, now, extra int64) Decision {
	p := l.period
	wHi, wLo := bits.Mul64(uint64(prev), uint64(p-e))
	var d Decision
	d.Remaining, d.Debt = remainingDebt(l.slidingLeft(cur, prev, e, wHi, wLo))
	switch {
	case cur > 0:
		d.ResetAfter = time.Duration(start + 2*p - now)
	case prev > 0:
		d.ResetAfter = time.Duration(start + p - now)
	}
	// Denied iff w > k·P with k = L - cur - extra.
	k := l.capacity - cur - extra
	kHi, kLo := bits.Mul64(uint64(max(k, 0)), uint64(p))
	if k < 0 || wHi > kHi || wHi == kHi && wLo > kLo {
		d.Code = Denied
		d.RetryAfter = time.Duration(l.slidingRetry(start, now, cur, prev, l.capacity-cur-1, 1))
	}
	return d
}

// slidingState is the state holding counts cur and prev in window start.
func (l *Limit) slidingState(start, cur, prev int64) State {
	switch {
	case cur > 0:
		return State{restAt: start + 2*l.period, t: start, n: uint32(cur), m: uint32(prev)}
	case prev > 0:
		return State{restAt: start + l.period, t: start, m: uint32(prev)}
	}
	return State{}
}

func (l *Limit) slidingOverdraft(s State, now, cost int64) (State, Decision) {
	start, cur, prev, e := l.slidingAt(s, now)
	if cost > 0 {
		cur = addCount(cur, cost)
		s = l.slidingState(start, cur, prev)
	}
	return s, l.slidingReport(start, cur, prev, e, now, 0)
}

func (l *Limit) slidingRefund(s State, now, units int64) (State, Decision) {
	start, cur, prev, e := l.slidingAt(s, now)
	if units > 0 && cur+prev > 0 {
		back := min(units, cur)
		cur -= back
		prev = max(prev-(units-back), 0)
		s = l.slidingState(start, cur, prev)
	}
	d := l.slidingReport(start, cur, prev, e, now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return s, d
}

// slidingRefundAt refunds units charged at chargedAt (≤ now): off the
// current window's count when chargedAt is in now's window, off the
// previous window's when it is in the one before, else nothing, never
// below zero. After a clock that went back (now before s's window) it
// refunds as slidingRefund.
func (l *Limit) slidingRefundAt(s State, now, units, chargedAt int64) (State, Decision) {
	start, cur, prev, e := l.slidingAt(s, now)
	if now < start {
		return l.slidingRefund(s, now, units)
	}
	if units > 0 {
		switch w := chargedAt - chargedAt%l.period; {
		case w == start && cur > 0:
			cur = max(cur-units, 0)
			s = l.slidingState(start, cur, prev)
		case w == start-l.period && prev > 0:
			prev = max(prev-units, 0)
			s = l.slidingState(start, cur, prev)
		}
	}
	d := l.slidingReport(start, cur, prev, e, now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return s, d
}
