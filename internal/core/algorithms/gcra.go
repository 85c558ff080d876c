package algorithms

import (
	"math"
	"math/bits"
	"time"
)

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
