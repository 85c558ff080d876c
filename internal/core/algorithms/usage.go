package algorithms

import (
	"math"
	"math/bits"
	"time"
)

// This file holds the decisions on usage that is known only after the fact
// (see "Checks, overdraft and refunds" in the package doc): Check decides
// without charging, Overdraft charges whatever is left, Refund gives back.

// MaxCount is the most hits a window's count holds: an Overdraft that would
// take a count past it leaves it at MaxCount (the counts are 32 bits).
const MaxCount = math.MaxUint32

// Check reports how a charge of cost 1 would be decided at now, without
// charging it: Denied (with RetryAfter for cost 1) when it would be denied,
// else Allowed with Remaining and ResetAfter as a peek reports them (the
// bucket uncharged). A bucket in debt is denied. The state is not changed,
// so none is returned. It costs no more than a Decide.
func (l *Limit) Check(s State, now int64) Decision {
	now = ClampTime(now)
	switch l.alg {
	case FixedWindow:
		start, count := l.fixedAt(s, now)
		return l.fixedReport(start, count, now, 1)
	case SlidingWindow:
		start, cur, prev, e := l.slidingAt(s, now)
		return l.slidingReport(start, cur, prev, e, now, 1)
	case TokenBucket, LeakyBucket, LeakyBucketQueue:
		if l.rateChanged(s) {
			o := l.at(int64(s.m))
			return o.gcraCheck(s, now)
		}
		return l.gcraCheck(s, now)
	case Concurrency:
		return l.concurrencyCheck(s, now)
	}
	return Decision{Code: OverCapacity}
}

// gcraCheck is gcra for a cost of 1, charging nothing: denied iff the
// backlog d is beyond C - I, with RetryAfter ceil(d - (C - I)), as gcra
// decides; else reporting the bucket uncharged.
func (l *Limit) gcraCheck(s State, now int64) Decision {
	dNs, dFrac := l.backlog(s, now)
	if dNs > l.oneNs || dNs == l.oneNs && dFrac > l.oneFrac {
		wNs, wFrac := dNs-l.oneNs, dFrac-l.oneFrac
		if wFrac < 0 {
			wNs, wFrac = wNs-1, wFrac+l.requests
		}
		return Decision{
			Code:       Denied,
			Remaining:  l.gcraRemaining(dNs, dFrac),
			ResetAfter: ceilDuration(dNs, dFrac),
			RetryAfter: ceilDuration(wNs, wFrac),
		}
	}
	return Decision{Remaining: l.gcraRemaining(dNs, dFrac), ResetAfter: ceilDuration(dNs, dFrac)}
}

// InDebt reports whether the bucket in state s holds more use at now than
// its capacity: after an Overdraft, until its refill (or, for the windows,
// the passing of its counts) has paid the excess back. A bucket in debt
// denies every charge and every Check.
func (l *Limit) InDebt(s State, now int64) bool {
	_, d := l.Overdraft(s, now, 0)
	return d.Code == Denied
}

// Overdraft charges cost in full at now, whatever is left, and returns the
// bucket's new state and a decision reporting the bucket after the charge.
// The bucket may go into debt: use beyond its capacity, bounded as the
// package doc says. The Code is Denied when the bucket is in debt after the
// charge, with RetryAfter the wait until a charge of cost 1 is admitted
// again; Allowed otherwise. Either way the charge is taken: the returned
// state always includes it.
//
// When the same charge would be admitted by Decide, Overdraft returns what
// Decide returns (Delay included, for LeakyBucketQueue). A cost ≤ 0
// charges nothing and returns s. now is taken as Decide takes it.
func (l *Limit) Overdraft(s State, now int64, cost int64) (State, Decision) {
	now = ClampTime(now)
	switch l.alg {
	case FixedWindow:
		return l.fixedOverdraft(s, now, cost)
	case SlidingWindow:
		return l.slidingOverdraft(s, now, cost)
	case TokenBucket, LeakyBucket, LeakyBucketQueue:
		if l.rateChanged(s) {
			return l.gcraChanged(s, now, cost, changedOverdraft)
		}
		return l.gcraOverdraft(s, now, cost)
	case Concurrency:
		return l.concurrencyOverdraft(s, now, cost)
	}
	return s, Decision{}
}

// Refund gives units back to the bucket at now, never past its rest state
// (full for the buckets, empty for the windows), and returns the bucket's
// new state and an Allowed decision reporting the bucket after the refund,
// as a peek would. A sliding window takes the units off its current
// window's count first, then off the previous window's. A bucket brought
// back to rest is the zero State. units ≤ 0 returns s.
func (l *Limit) Refund(s State, now int64, units int64) (State, Decision) {
	now = ClampTime(now)
	switch l.alg {
	case FixedWindow:
		return l.fixedRefund(s, now, units)
	case SlidingWindow:
		return l.slidingRefund(s, now, units)
	case TokenBucket, LeakyBucket, LeakyBucketQueue:
		if l.rateChanged(s) {
			return l.gcraChanged(s, now, units, changedRefund)
		}
		return l.gcraRefund(s, now, units)
	case Concurrency:
		return l.concurrencyRefund(s, now, units)
	}
	return s, Decision{}
}

// addCount returns count + cost, at most MaxCount (count ≤ MaxCount).
func addCount(count, cost int64) int64 {
	if cost > MaxCount-count {
		return MaxCount
	}
	return count + cost
}

// fixedAt returns the window that s settles now in and its count: now's
// window with count 0 once now is past s's window, else s's (see
// fixedWindow).
func (l *Limit) fixedAt(s State, now int64) (start, count int64) {
	start = now - now%l.period
	if start > s.t {
		return start, 0
	}
	return s.t, int64(s.n)
}

// fixedReport is the decision reporting count in window start at now,
// Denied when a cost of extra more does not fit (extra 0: in debt; 1: a
// check), with the RetryAfter of a cost of 1: the count starts over when
// the window ends.
func (l *Limit) fixedReport(start, count, now, extra int64) Decision {
	d := Decision{Remaining: max(l.capacity-count, 0)}
	if count > 0 {
		d.ResetAfter = time.Duration(start + l.period - now)
	}
	if count+extra > l.capacity {
		d.Code, d.RetryAfter = Denied, d.ResetAfter
	}
	return d
}

func (l *Limit) fixedOverdraft(s State, now, cost int64) (State, Decision) {
	start, count := l.fixedAt(s, now)
	if cost > 0 {
		count = addCount(count, cost)
		s = State{restAt: start + l.period, t: start, n: uint32(count)}
	}
	return s, l.fixedReport(start, count, now, 0)
}

func (l *Limit) fixedRefund(s State, now, units int64) (State, Decision) {
	start, count := l.fixedAt(s, now)
	if units > 0 && count > 0 {
		count = max(count-units, 0)
		if count == 0 {
			s = State{}
		} else {
			s = State{restAt: start + l.period, t: start, n: uint32(count)}
		}
	}
	d := l.fixedReport(start, count, now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return s, d
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
	d := Decision{Remaining: l.slidingRemaining(cur, prev, e, wHi, wLo)}
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

// backlog returns the backlog d = max(TAT-now, 0) of s at now as dNs +
// dFrac/R. It is at most MaxSpan, except after a clock that went back (or
// in a State of another Limit).
func (l *Limit) backlog(s State, now int64) (dNs, dFrac int64) {
	if s.t < now {
		return 0, 0
	}
	return s.t - now, min(int64(s.n), l.requests-1)
}

// TimesSaturated is Times for any n ≥ 0, saturating: n·Period/Requests as
// whole nanoseconds and a remainder over Requests, or (MaxSpan, 0) when
// that is more than MaxSpan. The buckets' Overdraft and Refund take n·P/R
// so for their cost.
func (l *Limit) TimesSaturated(n int64) (ns, frac int64) {
	hi, lo := bits.Mul64(uint64(n), uint64(l.period))
	if hi >= uint64(l.requests) {
		return int64(MaxSpan), 0
	}
	q, r := bits.Div64(hi, lo, uint64(l.requests))
	if q >= uint64(MaxSpan) {
		return int64(MaxSpan), 0
	}
	return int64(q), int64(r)
}

// gcraReport is the decision reporting a backlog of dNs + dFrac/R: Denied
// when it is beyond limNs + limFrac/R (the capacity span C: in debt; C - I:
// a cost of 1 does not fit, for a check), with the RetryAfter of a cost of
// 1, as gcra computes it: ceil(d - (C - I)).
func (l *Limit) gcraReport(dNs, dFrac, limNs, limFrac int64) Decision {
	d := Decision{Remaining: l.gcraRemaining(dNs, dFrac), ResetAfter: ceilDuration(dNs, dFrac)}
	if dNs > limNs || dNs == limNs && dFrac > limFrac {
		wNs, wFrac := dNs-l.oneNs, dFrac-l.oneFrac
		if wFrac < 0 {
			wNs, wFrac = wNs-1, wFrac+l.requests
		}
		d.Code = Denied
		d.RetryAfter = ceilDuration(wNs, wFrac)
	}
	return d
}

// gcraState is the state with a backlog of dNs + dFrac/R at now.
func (l *Limit) gcraState(now, dNs, dFrac int64) State {
	if dNs == 0 && dFrac == 0 {
		return State{}
	}
	return State{restAt: now + ceilNs(dNs, dFrac), t: now + dNs, n: uint32(dFrac), m: uint32(l.requests)}
}

func (l *Limit) gcraOverdraft(s State, now, cost int64) (State, Decision) {
	if cost > 0 && cost <= l.capacity {
		if next, d := l.gcra(s, now, cost); d.Code == Allowed {
			return next, d
		}
	}
	dNs, dFrac := l.backlog(s, now)
	// A backlog at the bound already (or past it, after a clock that went
	// back) stays as it is.
	if cost > 0 && dNs < int64(MaxSpan) {
		kNs, kFrac := l.TimesSaturated(cost)
		// Both at most MaxSpan = 2^62: the sum fits in a uint64.
		sum := uint64(dNs) + uint64(kNs)
		dFrac += kFrac
		if dFrac >= l.requests {
			sum, dFrac = sum+1, dFrac-l.requests
		}
		if sum > uint64(MaxSpan) || sum == uint64(MaxSpan) && dFrac > 0 {
			sum, dFrac = uint64(MaxSpan), 0
		}
		dNs = int64(sum)
		// TAT = now + d ≤ MaxTime + MaxSpan = MaxInt64.
		s = l.gcraState(now, dNs, dFrac)
	}
	return s, l.gcraReport(dNs, dFrac, l.spanNs, l.spanFrac)
}

func (l *Limit) gcraRefund(s State, now, units int64) (State, Decision) {
	dNs, dFrac := l.backlog(s, now)
	if units > 0 && (dNs > 0 || dFrac > 0) {
		kNs, kFrac := l.TimesSaturated(units)
		dNs, dFrac = dNs-kNs, dFrac-kFrac
		if dFrac < 0 {
			dNs, dFrac = dNs-1, dFrac+l.requests
		}
		if dNs < 0 {
			dNs, dFrac = 0, 0
		}
		s = l.gcraState(now, dNs, dFrac)
	}
	d := l.gcraReport(dNs, dFrac, l.spanNs, l.spanFrac)
	d.Code, d.RetryAfter = Allowed, 0
	return s, d
}
