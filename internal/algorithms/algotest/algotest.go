// Package algotest is the specification of decisions written out by hand:
// timelines of requests on one bucket, from a 1ns period to the longest at
// the latest time, from 1 per day to MaxRequests per nanosecond, with
// costs at and over capacity, clocks going back, and checks, overdraft
// charges into debt and refunds, each request with the exact Decision it
// must get.
//
// The cases live here once and are decided twice: internal/algorithms'
// table tests decide them with Limit.Decide directly (and check every
// decision against the contract that holds for all decisions), and
// internal/store/storetest decides them through store.Apply on every store
// (memory, Redis standalone, Redis Cluster). A change of a decision is a
// change here, and both must follow.
//
// It is test support: only tests and storetest import it.
package algotest

import (
	"math"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// Start is where every timeline starts: 2026-01-01T00:00:00Z in Unix
// nanoseconds, a multiple of every period the cases use up to a day (7s
// included), so that windows begin at Start.
const Start = int64(1_767_225_600_000_000_000)

// A Case is one timeline of requests on one bucket, starting from an empty
// State (a bucket never charged).
type Case struct {
	// Name says what the case is about. It is unique among the cases of
	// each algorithm.
	Name string
	// Algorithms are the algorithms that must decide every step alike.
	Algorithms []algorithms.Algorithm
	// Requests, Period and Burst are the limit's, as NewLimit takes them.
	Requests int64
	Period   time.Duration
	Burst    int64
	// Steps are decided in order, each on the state the one before left.
	Steps []Step
}

// Limit returns the case's limit for alg, one of c.Algorithms.
func (c Case) Limit(alg algorithms.Algorithm) (algorithms.Limit, error) {
	return algorithms.NewLimit(alg, c.Requests, c.Period, c.Burst)
}

// A Step is one request of one charge.
type Step struct {
	// At is when, after Start.
	At   time.Duration
	Cost int64
	// Kind says how the charge is applied (store.Kind): Admit (zero), a
	// Decide; Check, Overdraft and Refund, the Limit methods of those
	// names.
	Kind store.Kind
	// Want is the decision, exactly.
	Want algorithms.Decision
}

// Now is the step's time in Unix nanoseconds: Start+At.
func (s Step) Now() int64 { return Start + int64(s.At) }

func allowed(remaining int64, reset time.Duration) algorithms.Decision {
	return algorithms.Decision{Code: algorithms.Allowed, Remaining: remaining, ResetAfter: reset}
}

func queued(remaining int64, reset, delay time.Duration) algorithms.Decision {
	return algorithms.Decision{Code: algorithms.Allowed, Remaining: remaining, ResetAfter: reset, Delay: delay}
}

func denied(remaining int64, reset, retry time.Duration) algorithms.Decision {
	return algorithms.Decision{Code: algorithms.Denied, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

func overCapacity(remaining int64, reset time.Duration) algorithms.Decision {
	return algorithms.Decision{Code: algorithms.OverCapacity, Remaining: remaining, ResetAfter: reset}
}

const (
	ns     = time.Nanosecond
	ms     = time.Millisecond
	sec    = time.Second
	minute = time.Minute
	hour   = time.Hour
	day    = 24 * time.Hour
	year   = 365 * day

	maxReq  = algorithms.MaxRequests
	maxSpan = algorithms.MaxSpan
	// atMaxTime is the step time of algorithms.MaxTime, the latest.
	atMaxTime = time.Duration(algorithms.MaxTime - Start)
)

var (
	// The token bucket and the leaky bucket meter are one algorithm: every
	// case of one is a case of the other and must read the same.
	buckets = []algorithms.Algorithm{algorithms.TokenBucket, algorithms.LeakyBucket}
	queue   = []algorithms.Algorithm{algorithms.LeakyBucketQueue}
	fixed   = []algorithms.Algorithm{algorithms.FixedWindow}
	sliding = []algorithms.Algorithm{algorithms.SlidingWindow}
)

// Cases returns every case, in a slice of its own that the caller may
// change.
func Cases() []Case {
	return []Case{
		// token_bucket and leaky_bucket.
		{Name: "5 per second, burst 5: starts full, refills 1 per 200ms", Algorithms: buckets, Requests: 5, Period: sec, Burst: 5, Steps: []Step{
			{At: 0, Cost: 0, Want: allowed(5, 0)},
			{At: 0, Cost: 1, Want: allowed(4, 200*ms)},
			{At: 0, Cost: 4, Want: allowed(0, sec)},
			{At: 0, Cost: 1, Want: denied(0, sec, 200*ms)},
			{At: 200*ms - ns, Cost: 1, Want: denied(0, 800*ms+ns, ns)},
			{At: 200 * ms, Cost: 1, Want: allowed(0, sec)},
			{At: 700 * ms, Cost: 0, Want: allowed(2, 500*ms)},
			{At: 700 * ms, Cost: 6, Want: overCapacity(2, 500*ms)},
			{At: 700 * ms, Cost: 5, Want: denied(2, 500*ms, 500*ms)},
			{At: 1200 * ms, Cost: 5, Want: allowed(0, sec)},
			{At: 1200*ms + 10*year, Cost: 1, Want: allowed(4, 200*ms)},
		}},
		{Name: "5 per second, burst 10: burst above the rate", Algorithms: buckets, Requests: 5, Period: sec, Burst: 10, Steps: []Step{
			{At: 0, Cost: 10, Want: allowed(0, 2*sec)},
			{At: sec, Cost: 6, Want: denied(5, sec, 200*ms)},
			{At: sec, Cost: 5, Want: allowed(0, 2*sec)},
		}},
		// A third of the way into a period a third of the refill is there:
		// I = 333,333,333⅓ns, so the first token is back after
		// 333,333,334ns, not 333,333,333ns; at 1s exactly two more are.
		{Name: "3 per second: continuous, exact refill", Algorithms: buckets, Requests: 3, Period: sec, Burst: 3, Steps: []Step{
			{At: 0, Cost: 3, Want: allowed(0, sec)},
			{At: 333_333_333 * ns, Cost: 1, Want: denied(0, 666_666_667*ns, ns)},
			{At: 333_333_334 * ns, Cost: 1, Want: allowed(0, sec)},
			{At: sec, Cost: 0, Want: allowed(2, 333_333_334*ns)},
			{At: sec, Cost: 3, Want: denied(2, 333_333_334*ns, 333_333_334*ns)},
			{At: sec, Cost: 2, Want: allowed(0, sec)},
		}},
		{Name: "burst 1: one at a time", Algorithms: buckets, Requests: 10, Period: sec, Burst: 1, Steps: []Step{
			{At: 0, Cost: 1, Want: allowed(0, 100*ms)},
			{At: 40 * ms, Cost: 1, Want: denied(0, 60*ms, 60*ms)},
			{At: 40 * ms, Cost: 2, Want: overCapacity(0, 60*ms)},
			{At: 100 * ms, Cost: 1, Want: allowed(0, 100*ms)},
		}},
		{Name: "7 per 3s: an interval of 428,571,428 4/7 ns", Algorithms: buckets, Requests: 7, Period: 3 * sec, Burst: 7, Steps: []Step{
			{At: 0, Cost: 7, Want: allowed(0, 3*sec)},
			{At: 428_571_428 * ns, Cost: 1, Want: denied(0, 2_571_428_572*ns, ns)},
			{At: 428_571_429 * ns, Cost: 1, Want: allowed(0, 3*sec)},
			{At: 3 * sec, Cost: 0, Want: allowed(6, 428_571_429*ns)},
			{At: 3 * sec, Cost: 7, Want: denied(6, 428_571_429*ns, 428_571_429*ns)},
		}},
		// TAT is 12s after the first step; a now of 9s sees a backlog of 3s
		// where 10s saw 2s: less room, never more.
		{Name: "clock going back", Algorithms: buckets, Requests: 1, Period: sec, Burst: 2, Steps: []Step{
			{At: 10 * sec, Cost: 2, Want: allowed(0, 2*sec)},
			{At: 9 * sec, Cost: 1, Want: denied(0, 3*sec, 2*sec)},
			{At: 9 * sec, Cost: 0, Want: allowed(0, 3*sec)},
			{At: 11 * sec, Cost: 1, Want: allowed(0, 2*sec)},
			{At: 5 * sec, Cost: 0, Want: allowed(0, 8*sec)},
			{At: 13 * sec, Cost: 0, Want: allowed(2, 0)},
		}},
		{Name: "1 per day", Algorithms: buckets, Requests: 1, Period: day, Burst: 1, Steps: []Step{
			{At: 0, Cost: 1, Want: allowed(0, day)},
			{At: day - ns, Cost: 1, Want: denied(0, ns, ns)},
			{At: day, Cost: 1, Want: allowed(0, day)},
			{At: 30 * year, Cost: 1, Want: allowed(0, day)},
		}},
		{Name: "1e9 per second: 1ns apart", Algorithms: buckets, Requests: 1e9, Period: sec, Burst: 1e9, Steps: []Step{
			{At: 0, Cost: 1e9, Want: allowed(0, sec)},
			{At: ns, Cost: 2, Want: denied(1, sec-ns, ns)},
			{At: ns, Cost: 1, Want: allowed(0, sec)},
			{At: 500 * ms, Cost: 0, Want: allowed(499_999_999, 500*ms+ns)},
			{At: sec + ns, Cost: 0, Want: allowed(1e9, 0)},
		}},
		{Name: "MaxRequests per nanosecond", Algorithms: buckets, Requests: maxReq, Period: ns, Burst: maxReq, Steps: []Step{
			{At: 0, Cost: maxReq, Want: allowed(0, ns)},
			{At: 0, Cost: 1, Want: denied(0, ns, ns)},
			{At: ns, Cost: maxReq + 1, Want: overCapacity(maxReq, 0)},
			{At: ns, Cost: 1, Want: allowed(maxReq-1, ns)},
		}},
		// The longest span at the latest time: TAT reaches math.MaxInt64.
		{Name: "MaxSpan at MaxTime", Algorithms: buckets, Requests: maxReq, Period: maxSpan, Burst: maxReq, Steps: []Step{
			{At: atMaxTime, Cost: maxReq, Want: allowed(0, maxSpan)},
			{At: atMaxTime, Cost: 1, Want: denied(0, maxSpan, maxSpan/maxReq+1)},
			// Past MaxTime the clock stands still.
			{At: atMaxTime + year, Cost: 0, Want: allowed(0, maxSpan)},
		}},
		// A cost too big for any arithmetic is over capacity, and a negative
		// one is a peek.
		{Name: "a cost of MaxInt64", Algorithms: buckets, Requests: 10, Period: sec, Burst: 10, Steps: []Step{
			{At: 0, Cost: math.MaxInt64, Want: overCapacity(10, 0)},
			{At: 0, Cost: -5, Want: allowed(10, 0)},
			{At: 0, Cost: 10, Want: allowed(0, sec)},
		}},

		// Debt: I = 200ms, C = 1s. An overdraft of 8 leaves a backlog of
		// 1.6s, 600ms beyond C: denied until it is at most C - I = 800ms.
		{Name: "overdraft into debt, paid back at the rate", Algorithms: buckets, Requests: 5, Period: sec, Burst: 5, Steps: []Step{
			{At: 0, Kind: store.Overdraft, Cost: 8, Want: denied(0, 1600*ms, 800*ms)},
			{At: 0, Kind: store.Check, Want: denied(0, 1600*ms, 800*ms)},
			{At: 0, Cost: 1, Want: denied(0, 1600*ms, 800*ms)},
			{At: 799 * ms, Kind: store.Check, Want: denied(0, 801*ms, ms)},
			{At: 800 * ms, Kind: store.Check, Want: allowed(1, 800*ms)},
			{At: 800 * ms, Kind: store.Refund, Cost: 3, Want: allowed(4, 200*ms)},
			{At: 800 * ms, Kind: store.Refund, Cost: 100, Want: allowed(5, 0)},
			// An overdraft that fits is a charge.
			{At: 800 * ms, Kind: store.Overdraft, Cost: 5, Want: allowed(0, sec)},
			{At: 800 * ms, Kind: store.Overdraft, Cost: 0, Want: allowed(0, sec)},
			{At: 900 * ms, Kind: store.Overdraft, Cost: 1, Want: denied(0, 1100*ms, 300*ms)},
		}},
		// The bound: a backlog of MaxSpan, whatever the cost.
		{Name: "overdraft of MaxInt64", Algorithms: buckets, Requests: 5, Period: sec, Burst: 5, Steps: []Step{
			{At: 0, Kind: store.Overdraft, Cost: math.MaxInt64, Want: denied(0, maxSpan, maxSpan-800*ms)},
			{At: sec, Kind: store.Check, Want: denied(0, maxSpan-sec, maxSpan-1800*ms)},
			{At: sec, Kind: store.Overdraft, Cost: math.MaxInt64, Want: denied(0, maxSpan, maxSpan-800*ms)},
			{At: sec, Kind: store.Refund, Cost: math.MaxInt64, Want: allowed(5, 0)},
		}},

		// leaky_bucket_queue.
		//
		// Admitted requests leave 500ms apart, the first at once; the queue
		// holds 3, the one leaving now included.
		{Name: "2 per second, queue of 3", Algorithms: queue, Requests: 2, Period: sec, Burst: 3, Steps: []Step{
			{At: 0, Cost: 1, Want: queued(2, 500*ms, 0)},
			{At: 0, Cost: 1, Want: queued(1, sec, 500*ms)},
			{At: 0, Cost: 1, Want: queued(0, 1500*ms, sec)},
			{At: 0, Cost: 1, Want: denied(0, 1500*ms, 500*ms)},
			{At: 100 * ms, Cost: 1, Want: denied(0, 1400*ms, 400*ms)},
			{At: 500 * ms, Cost: 1, Want: queued(0, 1500*ms, sec)},
			{At: 3 * sec, Cost: 1, Want: queued(2, 500*ms, 0)},
			{At: 3 * sec, Cost: 2, Want: queued(0, 1500*ms, 500*ms)},
			{At: 3 * sec, Cost: 0, Want: allowed(0, 1500*ms)},
			{At: 3 * sec, Cost: 4, Want: overCapacity(0, 1500*ms)},
			{At: 3*sec + 10*year, Cost: 3, Want: queued(0, 1500*ms, 0)},
		}},
		// Delays round up: a request never leaves before its turn.
		{Name: "3 per second: delays are exact, rounded up", Algorithms: queue, Requests: 3, Period: sec, Burst: 3, Steps: []Step{
			{At: 0, Cost: 1, Want: queued(2, 333_333_334*ns, 0)},
			{At: 0, Cost: 1, Want: queued(1, 666_666_667*ns, 333_333_334*ns)},
			{At: 0, Cost: 1, Want: queued(0, sec, 666_666_667*ns)},
		}},
		// An overdraft that fits waits as a charge; one past the queue does
		// not wait, and leaves it in debt.
		{Name: "overdraft into the queue", Algorithms: queue, Requests: 2, Period: sec, Burst: 3, Steps: []Step{
			{At: 0, Kind: store.Overdraft, Cost: 1, Want: queued(2, 500*ms, 0)},
			{At: 0, Kind: store.Overdraft, Cost: 1, Want: queued(1, sec, 500*ms)},
			{At: 0, Kind: store.Overdraft, Cost: 3, Want: denied(0, 2500*ms, 1500*ms)},
			{At: 0, Cost: 1, Want: denied(0, 2500*ms, 1500*ms)},
			{At: 1500 * ms, Kind: store.Check, Want: allowed(1, sec)},
		}},
		{Name: "queue of 1 never delays", Algorithms: queue, Requests: 10, Period: sec, Burst: 1, Steps: []Step{
			{At: 0, Cost: 1, Want: queued(0, 100*ms, 0)},
			{At: 50 * ms, Cost: 1, Want: denied(0, 50*ms, 50*ms)},
			{At: 100 * ms, Cost: 1, Want: queued(0, 100*ms, 0)},
		}},
		{Name: "clock going back delays longer", Algorithms: queue, Requests: 1, Period: sec, Burst: 3, Steps: []Step{
			{At: 10 * sec, Cost: 1, Want: queued(2, sec, 0)},
			{At: 9 * sec, Cost: 1, Want: queued(0, 3*sec, 2*sec)},
			{At: 9 * sec, Cost: 1, Want: denied(0, 3*sec, sec)},
		}},

		// fixed_window.
		{Name: "10 per minute", Algorithms: fixed, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Cost: 0, Want: allowed(10, 0)},
			{At: 0, Cost: 4, Want: allowed(6, minute)},
			{At: 30 * sec, Cost: 6, Want: allowed(0, 30*sec)},
			{At: 30 * sec, Cost: 1, Want: denied(0, 30*sec, 30*sec)},
			{At: minute - ns, Cost: 1, Want: denied(0, ns, ns)},
			{At: minute - ns, Cost: 11, Want: overCapacity(0, ns)},
			// The count starts over at the window's end.
			{At: minute, Cost: 0, Want: allowed(10, 0)},
			{At: minute, Cost: 10, Want: allowed(0, minute)},
			{At: 90 * sec, Cost: 0, Want: allowed(0, 30*sec)},
			// Back into the previous window: still this window and its count.
			{At: 30 * sec, Cost: 1, Want: denied(0, 90*sec, 90*sec)},
			{At: 30 * sec, Cost: 0, Want: allowed(0, 90*sec)},
			{At: 2 * minute, Cost: 1, Want: allowed(9, minute)},
			{At: 2*minute + 10*year, Cost: 1, Want: allowed(9, minute)},
		}},
		// Windows align to multiples of the period since the epoch, not to
		// the first request: Start is a multiple of 7s, the first request
		// comes 3s later and its window ends 4s after it.
		{Name: "aligned to the epoch", Algorithms: fixed, Requests: 2, Period: 7 * sec, Steps: []Step{
			{At: 3 * sec, Cost: 2, Want: allowed(0, 4*sec)},
			{At: 7*sec - ns, Cost: 1, Want: denied(0, ns, ns)},
			{At: 7 * sec, Cost: 2, Want: allowed(0, 7*sec)},
		}},
		{Name: "1 per day", Algorithms: fixed, Requests: 1, Period: day, Steps: []Step{
			{At: 12 * hour, Cost: 1, Want: allowed(0, 12*hour)},
			{At: day - ns, Cost: 1, Want: denied(0, ns, ns)},
			{At: day, Cost: 1, Want: allowed(0, day)},
		}},
		{Name: "1e9 per second", Algorithms: fixed, Requests: 1e9, Period: sec, Steps: []Step{
			{At: 0, Cost: 1e9, Want: allowed(0, sec)},
			{At: sec - ns, Cost: 1, Want: denied(0, ns, ns)},
			{At: sec, Cost: 1e9 + 1, Want: overCapacity(1e9, 0)},
			{At: sec, Cost: 1, Want: allowed(1e9-1, sec)},
		}},
		{Name: "MaxSpan at MaxTime", Algorithms: fixed, Requests: maxReq, Period: maxSpan, Steps: []Step{
			{At: atMaxTime, Cost: maxReq, Want: allowed(0, ns)},
			{At: atMaxTime, Cost: 1, Want: denied(0, ns, ns)},
		}},
		// The boundary problem: fixed windows admit twice the limit within
		// 2ns across a boundary (the sliding window does not, below).
		// Debt: the count above the limit is gone when the window ends.
		{Name: "overdraft into debt until the window ends", Algorithms: fixed, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Cost: 4, Want: allowed(6, minute)},
			{At: 0, Kind: store.Overdraft, Cost: 8, Want: denied(0, minute, minute)},
			{At: 30 * sec, Kind: store.Check, Want: denied(0, 30*sec, 30*sec)},
			{At: 30 * sec, Kind: store.Refund, Cost: 3, Want: allowed(1, 30*sec)},
			{At: 30 * sec, Kind: store.Check, Want: allowed(1, 30*sec)},
			{At: 30 * sec, Kind: store.Refund, Cost: 100, Want: allowed(10, 0)},
			// The bound: a count of MaxCount.
			{At: minute, Kind: store.Overdraft, Cost: math.MaxInt64, Want: denied(0, minute, minute)},
			{At: 2 * minute, Kind: store.Check, Want: allowed(10, 0)},
		}},
		{Name: "admits 2L across a boundary", Algorithms: fixed, Requests: 10, Period: minute, Steps: []Step{
			{At: minute - ns, Cost: 10, Want: allowed(0, ns)},
			{At: minute, Cost: 10, Want: allowed(0, minute)},
		}},

		// sliding_window.
		//
		// At 66s the previous window's 10 weigh 10·54/60 = 9; at 72s 8; at
		// 78s 7. RetryAfter is when the weight has decayed enough.
		{Name: "10 per minute", Algorithms: sliding, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Cost: 0, Want: allowed(10, 0)},
			{At: 0, Cost: 10, Want: allowed(0, 2*minute)},
			{At: 59 * sec, Cost: 1, Want: denied(0, 61*sec, 7*sec)},
			{At: 66*sec - ns, Cost: 1, Want: denied(0, 54*sec+ns, ns)},
			{At: 66 * sec, Cost: 1, Want: allowed(0, 114*sec)},
			{At: 72 * sec, Cost: 0, Want: allowed(1, 108*sec)},
			{At: 72 * sec, Cost: 2, Want: denied(1, 108*sec, 6*sec)},
			{At: 78 * sec, Cost: 2, Want: allowed(0, 102*sec)},
			// The next window: the 3 of the last one weigh 3 at first.
			{At: 2 * minute, Cost: 0, Want: allowed(7, minute)},
			{At: 2 * minute, Cost: 11, Want: overCapacity(7, minute)},
			{At: 3*minute - ns, Cost: 10, Want: denied(9, ns, ns)},
			{At: 3 * minute, Cost: 10, Want: allowed(0, 2*minute)},
			// Back into an earlier window: this window, the previous count at
			// full weight. The next window has room for 1 once 10·(60-e)/60
			// ≤ 9, at e = 6s.
			{At: 150 * sec, Cost: 1, Want: denied(0, 150*sec, 96*sec)},
			{At: 150 * sec, Cost: 0, Want: allowed(0, 150*sec)},
			{At: 4 * minute, Cost: 0, Want: allowed(0, minute)},
			{At: 3*minute + 10*year, Cost: 1, Want: allowed(9, 2*minute)},
		}},
		// Back from the window [1m, 2m) to 30s: settled at 1m, where the
		// previous window's 5 weigh in full.
		{Name: "clock going back with a previous count", Algorithms: sliding, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Cost: 5, Want: allowed(5, 2*minute)},
			{At: minute, Cost: 3, Want: allowed(2, 2*minute)},
			{At: 30 * sec, Cost: 0, Want: allowed(2, 150*sec)},
			{At: 30 * sec, Cost: 2, Want: allowed(0, 150*sec)},
			{At: 30 * sec, Cost: 1, Want: denied(0, 150*sec, 42*sec)},
			{At: 72 * sec, Cost: 1, Want: allowed(0, 108*sec)},
		}},
		// When cost is the whole limit, it waits for both windows to empty.
		{Name: "cost = limit", Algorithms: sliding, Requests: 4, Period: sec, Steps: []Step{
			{At: 500 * ms, Cost: 1, Want: allowed(3, 1500*ms)},
			{At: 600 * ms, Cost: 4, Want: denied(3, 1400*ms, 1400*ms)},
			{At: sec, Cost: 4, Want: denied(3, sec, sec)},
			{At: 2 * sec, Cost: 4, Want: allowed(0, 2*sec)},
		}},
		{Name: "1 per day", Algorithms: sliding, Requests: 1, Period: day, Steps: []Step{
			{At: 0, Cost: 1, Want: allowed(0, 2*day)},
			{At: day, Cost: 1, Want: denied(0, day, day)},
			{At: 36 * hour, Cost: 1, Want: denied(0, 12*hour, 12*hour)},
			{At: 2 * day, Cost: 1, Want: allowed(0, 2*day)},
		}},
		{Name: "1e9 per second", Algorithms: sliding, Requests: 1e9, Period: sec, Steps: []Step{
			{At: 0, Cost: 1e9, Want: allowed(0, 2*sec)},
			// 1e9 weigh 1e9·(1e9-e)/1e9 = 1e9 - e, exactly.
			{At: sec + 250*ms, Cost: 0, Want: allowed(250e6, 750*ms)},
			{At: sec + 250*ms, Cost: 250e6 + 1, Want: denied(250e6, 750*ms, ns)},
			{At: sec + 250*ms, Cost: 250e6, Want: allowed(0, 1750*ms)},
		}},
		{Name: "longest period at MaxTime", Algorithms: sliding, Requests: maxReq, Period: maxSpan / 2, Steps: []Step{
			{At: atMaxTime, Cost: maxReq, Want: allowed(0, maxSpan/2+ns)},
			{At: atMaxTime, Cost: 1, Want: denied(0, maxSpan/2+ns, (1<<29+2)*ns)},
		}},
		// The boundary problem, solved: the sliding window weighs the
		// previous window in and admits the limit within 2ns across a
		// boundary, no more.
		// Debt: 15 in one window weigh 15·(P-e)/P in the next; a cost of 1
		// fits again once that is at most 9, at e = 24s.
		{Name: "overdraft into debt, weighed out", Algorithms: sliding, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Kind: store.Overdraft, Cost: 15, Want: denied(0, 2*minute, 84*sec)},
			{At: minute, Kind: store.Check, Want: denied(0, minute, 24*sec)},
			{At: minute + 24*sec, Kind: store.Check, Want: allowed(1, 36*sec)},
			{At: minute + 24*sec, Cost: 1, Want: allowed(0, 96*sec)},
			// Back off the current window's count first, then the previous.
			{At: minute + 24*sec, Kind: store.Refund, Cost: 3, Want: allowed(2, 36*sec)},
			{At: minute + 24*sec, Kind: store.Refund, Cost: math.MaxInt64, Want: allowed(10, 0)},
		}},
		{Name: "does not admit 2L across a boundary", Algorithms: sliding, Requests: 10, Period: minute, Steps: []Step{
			{At: minute - ns, Cost: 10, Want: allowed(0, minute+ns)},
			{At: minute, Cost: 1, Want: denied(0, minute, 6*sec)},
			{At: minute + ns, Cost: 1, Want: denied(0, minute-ns, 6*sec-ns)},
		}},
		// With a period of 100ns the bound L + ⌊L·d/P⌋ allows 103 over the
		// 3ns from 99 to 101: 101 are admitted.
		{Name: "within L+⌊L·d/P⌋ at a boundary", Algorithms: sliding, Requests: 100, Period: 100 * ns, Steps: []Step{
			{At: 99 * ns, Cost: 100, Want: allowed(0, 101*ns)},
			{At: 100 * ns, Cost: 1, Want: denied(0, 100*ns, ns)},
			{At: 101 * ns, Cost: 1, Want: allowed(0, 199*ns)},
			{At: 101 * ns, Cost: 1, Want: denied(0, 199*ns, ns)},
		}},
	}
}
