package algorithms

import "time"

// State is one bucket's state: 24 bytes, copied by value. The zero State is
// a bucket at rest (full, or empty of hits) for every algorithm, so a store
// keeps no entry for a bucket at rest and starts a new one from State{}.
//
// A State is read by the Limit that produced it, or by a changed Limit of
// the same period and kind of state, which keeps what was used (see "A
// changed limit" in the package doc); applying it to any other Limit gives
// unspecified (but never panicking) answers.
type State struct {
	// restAt is when the bucket is back at rest if nothing else arrives,
	// in the same nanoseconds as now; 0 for the zero State.
	restAt int64
	// t is a time: the theoretical arrival time (whole nanoseconds) for the
	// buckets, the current window's start for the windows.
	t int64
	// n is the fraction of t over Requests for the buckets, the current
	// window's count for the windows.
	n uint32
	// m is the previous window's count for sliding_window, 0 for
	// fixed_window, and for the buckets the Requests of the Limit that
	// wrote the state (0 in a state written before states recorded it).
	m uint32
}

// AtRest reports whether the bucket is back at rest at now: deleting it
// then loses nothing, as State{} decides from now on exactly as s would
// (should the clock later go back before now, s would have been the
// stricter of the two). now is taken as ClampTime(now), as Decide takes
// it: past MaxTime the clock stands still for both.
func (s State) AtRest(now int64) bool { return ClampTime(now) >= s.restAt }

// ClampTime returns now within [0, MaxTime]: the time Decide and AtRest
// take a reading of now as. Every store judges a bucket's time with it.
func ClampTime(now int64) int64 { return min(max(now, 0), MaxTime) }

// RestAt returns when the bucket is back at rest if nothing else arrives.
func (s State) RestAt() int64 { return s.restAt }

// Code is the outcome of a decision.
type Code uint8

const (
	// Allowed: the cost was admitted (or, for cost 0, only reported).
	Allowed Code = iota
	// Denied: the cost does not fit now; RetryAfter says when it will.
	Denied
	// OverCapacity: the cost exceeds the limit's capacity and can never be
	// admitted, however long the caller waits. RetryAfter is 0.
	OverCapacity
)

// String returns "allowed", "denied" or "over_capacity".
func (c Code) String() string {
	switch c {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case OverCapacity:
		return "over_capacity"
	}
	return "Code(?)"
}

// Decision is what one charge against one bucket decided.
type Decision struct {
	Code Code
	// Remaining is how many further requests of cost 1 would be admitted
	// right now, after this decision's charge if it was admitted: a cost
	// of Remaining would be admitted now, Remaining+1 would not. Between 0
	// and the limit's Capacity.
	Remaining int64
	// ResetAfter is how long until the bucket is back at rest — full for
	// the buckets, empty of hits for the windows — if nothing else arrives:
	// then Remaining is Capacity again. For sliding_window that takes until
	// both windows' counts have passed. 0 for a bucket at rest.
	ResetAfter time.Duration
	// RetryAfter, for a denial, is the shortest wait after which the same
	// cost would be admitted if nothing else arrived: waiting exactly
	// RetryAfter succeeds, 1ns less does not. 0 unless Code is Denied.
	RetryAfter time.Duration
	// Delay, for LeakyBucketQueue, is how long an admitted request must wait
	// before it proceeds so that admitted requests leave at the constant
	// rate: the backlog ahead of it, rounded up to a nanosecond, 0 when the
	// queue is empty. 0 for the other algorithms, peeks and denials.
	Delay time.Duration
}

// Decide charges cost against the bucket in state s at now and returns the
// bucket's new state and the decision. now is in integer nanoseconds from a
// monotonic source (the window algorithms align windows to multiples of the
// period from 0, so now should count from the Unix epoch for windows to
// align as Envoy's service aligns them). A now outside [0, MaxTime] is
// taken as the nearer end of that range.
//
// Cost 0 is a peek: the decision reports Remaining and ResetAfter, Code is
// Allowed, and the returned state equals s. A negative cost is a peek too.
// A cost above Capacity is OverCapacity and leaves s unchanged; so does a
// denial. Both report Remaining and ResetAfter as a peek would. A now
// earlier than one already seen by s never admits more than the later one
// did: each algorithm's doc says how it settles a clock that went back.
//
// Decide does not allocate and reads no clock. On the zero Limit every
// cost above 0 is OverCapacity.
func (l *Limit) Decide(s State, now int64, cost int64) (State, Decision) {
	now = ClampTime(now)
	switch l.alg {
	case FixedWindow:
		return l.fixedWindow(s, now, cost)
	case SlidingWindow:
		return l.slidingWindow(s, now, cost)
	case TokenBucket, LeakyBucket, LeakyBucketQueue:
		if l.rateChanged(s) {
			return l.gcraChanged(s, now, cost, changedDecide)
		}
		return l.gcra(s, now, cost)
	case Concurrency:
		return l.concurrency(s, now, cost)
	}
	if cost > 0 {
		return s, Decision{Code: OverCapacity}
	}
	return s, Decision{}
}

// Check, Overdraft and Refund decide usage that is known only after the
// fact (see "Checks, overdraft and refunds" in the package doc). Each
// algorithm's arithmetic for them is in its own file, beside its decision.

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
