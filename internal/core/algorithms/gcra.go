package algorithms

import (
	"math"
	"math/bits"
	"time"
)

// This file is the arithmetic of TokenBucket, LeakyBucket and
// LeakyBucketQueue: their decision (gcra, which Decide calls) and their
// usage operations (Check, Overdraft, Refund); change.go reads a state
// written at another rate. The Redis store's Lua mirrors it function for
// function in the section headed "gcra.go" of
// internal/store/redis/fast.lua (plain numbers) and of decide.lua
// (bignums).

// gcra decides TokenBucket, LeakyBucket and LeakyBucketQueue: one
// arithmetic, the generic cell rate algorithm, read three ways (see the
// package doc).
//
// Notation: R = Requests, P = Period, I = P/R the emission interval, C =
// Capacity·I the capacity span. Times are rationals ns + frac/R with
// 0 ≤ frac < R. The state holds the theoretical arrival time TAT = s.t +
// s.n/R: the time at which the bucket is back at rest, and the R it was
// written with (s.m; see backlog for a state written at another rate). The backlog at now is
// d = max(TAT-now, 0), the time the bucket still needs to be back at rest;
// d/I is the leaky bucket's level and Capacity - d/I the token bucket's
// tokens.
//
// A charge of cost is admitted iff d + cost·I ≤ C. It then moves TAT to
// now + d + cost·I. Denied, the same cost is admitted once d has drained to
// C - cost·I: after d + cost·I - C, rounded up to whole nanoseconds.
func (l *Limit) gcra(s State, now, cost int64) (State, Decision) {
	r := l.requests
	dNs, dFrac := l.backlog(s, now)

	if cost <= 0 || cost > l.capacity {
		d := Decision{Remaining: l.gcraRemaining(dNs, dFrac), ResetAfter: ceilDuration(dNs, dFrac)}
		if cost > 0 {
			d.Code = OverCapacity
		}
		return s, d
	}

	// k = cost·I, and a = C - k ≥ 0, the most backlog that admits cost.
	kNs, kFrac := l.intervalNs, l.intervalFrac
	if cost != 1 {
		// Saturated only for the limit of a changed rate (at), whose
		// capacity span may be capped at MaxSpan.
		kNs, kFrac = l.TimesSaturated(cost)
	}
	aNs, aFrac := l.spanNs-kNs, l.spanFrac-kFrac
	if aFrac < 0 {
		aNs, aFrac = aNs-1, aFrac+r
	}
	if dNs > aNs || dNs == aNs && dFrac > aFrac {
		// Denied. Waiting w leaves a backlog of d - w (d > a ≥ 0), which
		// admits iff d - w ≤ a: the least whole w is ceil(d - a).
		wNs, wFrac := dNs-aNs, dFrac-aFrac
		if wFrac < 0 {
			wNs, wFrac = wNs-1, wFrac+r
		}
		return s, Decision{
			Code:       Denied,
			Remaining:  l.gcraRemaining(dNs, dFrac),
			ResetAfter: ceilDuration(dNs, dFrac),
			RetryAfter: ceilDuration(wNs, wFrac),
		}
	}

	var delay int64
	if l.alg == LeakyBucketQueue {
		// The queue ahead of this request drains in d.
		delay = ceilNs(dNs, dFrac)
	}
	// The new backlog d + k ≤ C ≤ MaxSpan; TAT = now + d + k ≤ MaxTime + MaxSpan.
	dNs, dFrac = dNs+kNs, dFrac+kFrac
	if dFrac >= r {
		dNs, dFrac = dNs+1, dFrac-r
	}
	tat := now + dNs
	reset := ceilNs(dNs, dFrac)
	return State{restAt: now + reset, t: tat, n: uint32(dFrac), m: uint32(r)}, Decision{
		Code:       Allowed,
		Remaining:  l.gcraRemaining(dNs, dFrac),
		ResetAfter: time.Duration(reset),
		Delay:      time.Duration(delay),
	}
}

// gcraRemaining returns how many charges of cost 1 a backlog of dNs +
// dFrac/R (dNs ≥ 0, 0 ≤ dFrac < R) leaves room for: the largest whole k with
// d + k·I ≤ C, that is floor((C-d)·R/P), or 0 when d > C (a clock that went
// back).
func (l *Limit) gcraRemaining(dNs, dFrac int64) int64 {
	ns, frac := l.spanNs-dNs, l.spanFrac-dFrac
	if frac < 0 {
		ns, frac = ns-1, frac+l.requests
	}
	if ns < 0 {
		return 0
	}
	// (C-d)·R = ns·R + frac ≤ Capacity·P, so the quotient is at most
	// Capacity and fits.
	hi, lo := bits.Mul64(uint64(ns), uint64(l.requests))
	lo, carry := bits.Add64(lo, uint64(frac), 0)
	q, _ := bits.Div64(hi+carry, lo, uint64(l.period))
	return int64(q)
}

// ceilNs rounds ns + frac/R (frac ≥ 0) up to whole nanoseconds, saturating
// at math.MaxInt64 (reached only from a State of another Limit).
func ceilNs(ns, frac int64) int64 {
	if frac > 0 && ns < math.MaxInt64 {
		ns++
	}
	return ns
}

func ceilDuration(ns, frac int64) time.Duration { return time.Duration(ceilNs(ns, frac)) }

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
