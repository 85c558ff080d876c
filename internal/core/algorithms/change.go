package algorithms

import "math/bits"

// This file holds what a bucket's state means to a changed limit (see "A
// changed limit" in the package doc). The windows need nothing here: their
// states are counts, which a limit of the same period reads as they are.
// The buckets' state is a time, a backlog, which means requests only at a
// rate: a state records the Requests of the limit that wrote it (State.m;
// 0 in a state written before states recorded it, taken as the deciding
// limit's).

// rateChanged reports whether s, a state of one of the buckets, was written
// at another rate than l's.
func (l *Limit) rateChanged(s State) bool {
	return s.m != 0 && int64(s.m) != l.requests
}

// gcraOp names the decision gcraChanged makes.
type gcraOp uint8

const (
	changedDecide gcraOp = iota
	changedOverdraft
	changedRefund
)

// gcraChanged decides op on a state s written at another rate. A decision
// that writes the bucket (an admission, an overdraft charge, a refund) is
// l's on the state converted at now (convert): from then on the bucket
// drains at l's rate. One that writes nothing (a peek, a denial, a cost
// above capacity) leaves the state at its old rate, and reports it as the
// limit at does — l's capacity at the old rate, which is how the bucket
// drains until a charge writes it — so that its RetryAfter and ResetAfter
// come true if nothing else arrives.
func (l *Limit) gcraChanged(s State, now, cost int64, op gcraOp) (State, Decision) {
	if cost > 0 {
		c := l.convert(s, now)
		switch op {
		case changedOverdraft:
			return l.gcraOverdraft(c, now, cost)
		case changedRefund:
			return l.gcraRefund(c, now, cost)
		}
		if next, d := l.gcra(c, now, cost); d.Code == Allowed {
			return next, d
		}
	}
	o := l.at(int64(s.m))
	switch op {
	case changedOverdraft:
		return o.gcraOverdraft(s, now, cost)
	case changedRefund:
		return o.gcraRefund(s, now, cost)
	}
	return o.gcra(s, now, cost)
}

// at returns the limit that reports a state written at m requests per
// Period, until a charge writes it at l's rate: l's algorithm, Period and
// Capacity at a rate of m. Its capacity span Capacity·Period/m is capped
// at MaxSpan, the bound on a backlog.
func (l *Limit) at(m int64) Limit {
	o := Limit{alg: l.alg, requests: m, period: l.period, capacity: l.capacity}
	o.intervalNs, o.intervalFrac = o.times(1)
	o.spanNs, o.spanFrac = o.TimesSaturated(l.capacity)
	o.oneNs, o.oneFrac = o.spanNs-o.intervalNs, o.spanFrac-o.intervalFrac
	if o.oneFrac < 0 {
		o.oneNs, o.oneFrac = o.oneNs-1, o.oneFrac+m
	}
	return o
}

// convert returns s, written at s.m requests per Period, as the state of
// l with the same level at now — the same requests not yet drained,
// d·s.m/P for a backlog d — which is a backlog of d·s.m/R at l's rate,
// exactly (or MaxSpan, the bound on debt, when that is more).
func (l *Limit) convert(s State, now int64) State {
	if s.t < now {
		return State{}
	}
	// (t-now)·m + n, below 2^63·2^32 + 2^32: hi is below 2^32.
	hi, lo := bits.Mul64(uint64(s.t-now), uint64(s.m))
	lo, carry := bits.Add64(lo, uint64(s.n), 0)
	hi += carry
	if hi >= uint64(l.requests) {
		return l.gcraState(now, int64(MaxSpan), 0)
	}
	q, r := bits.Div64(hi, lo, uint64(l.requests))
	if q > uint64(MaxSpan) || q == uint64(MaxSpan) && r != 0 {
		return l.gcraState(now, int64(MaxSpan), 0)
	}
	return l.gcraState(now, int64(q), int64(r))
}

// WrittenBy returns s as a state written by l, for a state written before
// states recorded their rate (State.m 0): a bucket's state then records l's
// Requests, so that a changed limit reads it as l's. Any other state, and
// a window's, is returned as it is.
func (s State) WrittenBy(l *Limit) State {
	if l.alg.usesBurst() && s.m == 0 && s != (State{}) {
		s.m = uint32(l.requests)
	}
	return s
}
