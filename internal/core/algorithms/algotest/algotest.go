// Package algotest is the specification of decisions written out by hand:
// timelines of requests on one bucket, from a 1ns period to the longest at
// the latest time, from 1 per day to MaxRequests per nanosecond, with
// costs at and over capacity, clocks going back, and checks, overdraft
// charges into debt and refunds, each request with the exact Decision it
// must get.
//
// The cases live here once and are decided twice: internal/core/algorithms'
// table tests decide them with Limit.Decide directly (and check every
// decision against the contract that holds for all decisions), and
// internal/store/storetest decides them through store.Apply on every store
// (memory, Redis standalone, Redis Cluster). A change of a decision is a
// change here, and both must follow.
//
// It is test support: only tests and storetest import it.
package algotest

import (
	"fmt"
	"math"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// Start is where every timeline starts: 2026-01-01T00:00:00Z in Unix
// nanoseconds, a multiple of every period the cases use up to a day (7s
// included), so that windows begin at Start.
const Start = int64(1_767_225_600_000_000_000)

// A Case is one timeline of requests on one bucket, starting from an empty
// State (a bucket never charged). A step may change the limit, as a policy
// reload does: the bucket keeps its state, converted to the new limit.
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

// Limit returns the case's limit for alg, one of c.Algorithms, at its
// start.
func (c Case) Limit(alg algorithms.Algorithm) (algorithms.Limit, error) {
	return algorithms.NewLimit(alg, c.Requests, c.Period, c.Burst)
}

// Limits returns the limit in force at each step for alg: the case's, then
// from each step with a Change on, the changed one.
func (c Case) Limits(alg algorithms.Algorithm) ([]algorithms.Limit, error) {
	l, err := c.Limit(alg)
	if err != nil {
		return nil, err
	}
	limits := make([]algorithms.Limit, len(c.Steps))
	for i, st := range c.Steps {
		if st.Change != (Change{}) {
			if l, err = algorithms.NewLimit(alg, st.Change.Requests, c.Period, st.Change.Burst); err != nil {
				return nil, fmt.Errorf("step %d: %w", i, err)
			}
		}
		limits[i] = l
	}
	return limits, nil
}

// Change is a changed limit, in force from its step on: Requests and Burst
// (0: Requests) as NewLimit takes them, over the case's Period, with the
// same algorithm — what a policy reload that keeps a bucket may change.
// The zero Change changes nothing.
type Change struct {
	Requests, Burst int64
}

// A Step is one request of one charge.
type Step struct {
	// At is when, after Start.
	At   time.Duration
	Cost int64
	// Kind says how the charge is applied (algorithms.Kind): Admit (zero), a
	// Decide; Check, Overdraft and Refund, the Limit methods of those
	// names.
	Kind algorithms.Kind
	// Want is the decision, exactly.
	Want algorithms.Decision
	// Change, unless zero, changes the limit from this step on.
	Change Change
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

// owing is d with Debt debt: the units a bucket in debt owes.
func owing(debt int64, d algorithms.Decision) algorithms.Decision {
	d.Debt = debt
	return d
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
	conc    = []algorithms.Algorithm{algorithms.Concurrency}
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
			{At: 9 * sec, Cost: 1, Want: owing(1, denied(0, 3*sec, 2*sec))},
			{At: 9 * sec, Cost: 0, Want: owing(1, allowed(0, 3*sec))},
			{At: 11 * sec, Cost: 1, Want: allowed(0, 2*sec)},
			{At: 5 * sec, Cost: 0, Want: owing(6, allowed(0, 8*sec))},
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
			{At: 0, Kind: algorithms.Overdraft, Cost: 8, Want: owing(3, denied(0, 1600*ms, 800*ms))},
			{At: 0, Kind: algorithms.Check, Want: owing(3, denied(0, 1600*ms, 800*ms))},
			{At: 0, Cost: 1, Want: owing(3, denied(0, 1600*ms, 800*ms))},
			{At: 799 * ms, Kind: algorithms.Check, Want: denied(0, 801*ms, ms)},
			{At: 800 * ms, Kind: algorithms.Check, Want: allowed(1, 800*ms)},
			{At: 800 * ms, Kind: algorithms.Refund, Cost: 3, Want: allowed(4, 200*ms)},
			{At: 800 * ms, Kind: algorithms.Refund, Cost: 100, Want: allowed(5, 0)},
			// An overdraft that fits is a charge.
			{At: 800 * ms, Kind: algorithms.Overdraft, Cost: 5, Want: allowed(0, sec)},
			{At: 800 * ms, Kind: algorithms.Overdraft, Cost: 0, Want: allowed(0, sec)},
			{At: 900 * ms, Kind: algorithms.Overdraft, Cost: 1, Want: owing(1, denied(0, 1100*ms, 300*ms))},
		}},
		// The bound: a backlog of MaxSpan, whatever the cost.
		{Name: "overdraft of MaxInt64", Algorithms: buckets, Requests: 5, Period: sec, Burst: 5, Steps: []Step{
			{At: 0, Kind: algorithms.Overdraft, Cost: math.MaxInt64, Want: owing(23058430088, denied(0, maxSpan, maxSpan-800*ms))},
			{At: sec, Kind: algorithms.Check, Want: owing(23058430083, denied(0, maxSpan-sec, maxSpan-1800*ms))},
			{At: sec, Kind: algorithms.Overdraft, Cost: math.MaxInt64, Want: owing(23058430088, denied(0, maxSpan, maxSpan-800*ms))},
			{At: sec, Kind: algorithms.Refund, Cost: math.MaxInt64, Want: allowed(5, 0)},
		}},

		// A changed limit keeps what was used: the level (the requests not
		// yet drained) is kept. 10 per hour, I = 360s: an overdraft of 22
		// leaves a backlog of 7920s. At 40 per hour 18 are left. Until a
		// charge writes the bucket it drains at the rate it was written
		// with, 10 per hour: a peek or a denial reports it so (a retry in
		// 360s, not 90s); once charged, the 22 and the 18 are a backlog of
		// 3600s at 40 per hour, I = 90s.
		{Name: "raised limit keeps what was used", Algorithms: buckets, Requests: 10, Period: hour, Burst: 10, Steps: []Step{
			{At: 0, Kind: algorithms.Overdraft, Cost: 22, Want: owing(12, denied(0, 7920*sec, 4680*sec))},
			{At: 0, Cost: 0, Change: Change{Requests: 40, Burst: 40}, Want: allowed(18, 7920*sec)},
			{At: 0, Cost: 19, Want: denied(18, 7920*sec, 360*sec)},
			{At: 0, Cost: 18, Want: allowed(0, hour)},
			{At: 0, Cost: 1, Want: denied(0, hour, 90*sec)},
			{At: 90 * sec, Cost: 1, Want: allowed(0, hour)},
		}},
		// An hour at 10 per hour drains 10 of the 22; the 12 left are
		// 1080s at 40 per hour, and 28 more fill it.
		{Name: "converted when next charged", Algorithms: buckets, Requests: 10, Period: hour, Burst: 10, Steps: []Step{
			{At: 0, Kind: algorithms.Overdraft, Cost: 22, Want: owing(12, denied(0, 7920*sec, 4680*sec))},
			{At: hour, Kind: algorithms.Check, Change: Change{Requests: 40, Burst: 40}, Want: allowed(28, 4320*sec)},
			{At: hour, Cost: 29, Want: denied(28, 4320*sec, 360*sec)},
			{At: hour, Cost: 28, Want: allowed(0, hour)},
		}},
		// Lowered, the same use can be debt: 30 of 40 per hour, written at
		// 10 per hour, are a backlog of 10800s, beyond C = 3600s. An
		// overdraft writes it so (and adds its own).
		{Name: "lowered limit: what was used is debt", Algorithms: buckets, Requests: 40, Period: hour, Burst: 40, Steps: []Step{
			{At: 0, Cost: 30, Want: allowed(10, 2700*sec)},
			{At: 0, Kind: algorithms.Overdraft, Cost: 1, Change: Change{Requests: 10, Burst: 10}, Want: owing(21, denied(0, 11160*sec, 7920*sec))},
			{At: 7920*sec - ns, Cost: 1, Want: denied(0, 3240*sec+ns, ns)},
			{At: 7920 * sec, Cost: 1, Want: allowed(0, hour)},
		}},
		// Denials write nothing: the 30 drain at 40 per hour until one of
		// 10 fits (30 - 1890s·40/h = 9), when RetryAfter said.
		{Name: "lowered limit: the old rate until charged", Algorithms: buckets, Requests: 40, Period: hour, Burst: 40, Steps: []Step{
			{At: 0, Cost: 30, Want: allowed(10, 2700*sec)},
			{At: 0, Cost: 1, Change: Change{Requests: 10, Burst: 10}, Want: owing(20, denied(0, 2700*sec, 1890*sec))},
			{At: 0, Kind: algorithms.Check, Want: owing(20, denied(0, 2700*sec, 1890*sec))},
			{At: 1890*sec - ns, Cost: 1, Want: denied(0, 810*sec+ns, ns)},
			{At: 1890 * sec, Cost: 1, Want: allowed(0, hour)},
		}},
		// A burst alone changes the capacity, not the backlog.
		{Name: "changed burst", Algorithms: buckets, Requests: 5, Period: sec, Burst: 5, Steps: []Step{
			{At: 0, Cost: 5, Want: allowed(0, sec)},
			{At: 0, Cost: 0, Change: Change{Requests: 5, Burst: 10}, Want: allowed(5, sec)},
			{At: 0, Cost: 5, Want: allowed(0, 2*sec)},
			{At: 0, Cost: 0, Change: Change{Requests: 5, Burst: 1}, Want: owing(9, allowed(0, 2*sec))},
			{At: 1800 * ms, Cost: 1, Want: denied(0, 200*ms, 200*ms)},
			{At: 2 * sec, Cost: 1, Want: allowed(0, 200*ms)},
		}},
		// Exact through the fractions: one request at 3 per second is a
		// backlog of 333,333,333⅓ns; at 7 per second the same request is
		// 142,857,142 6/7ns, one interval exactly, and 6 more fill the
		// second.
		{Name: "changed rate, exact to the fraction", Algorithms: buckets, Requests: 3, Period: sec, Burst: 3, Steps: []Step{
			{At: 0, Cost: 1, Want: allowed(2, 333_333_334*ns)},
			{At: 0, Cost: 0, Change: Change{Requests: 7, Burst: 7}, Want: allowed(6, 333_333_334*ns)},
			{At: 0, Cost: 6, Want: allowed(0, sec)},
			{At: 0, Cost: 1, Want: denied(0, sec, 142_857_143*ns)},
			// Back at 3 per second, the 3½ requests not yet drained at 500ms
			// are more than 3: in debt, and at rest 500ms later (at 7 per
			// second, until charged).
			{At: 500 * ms, Cost: 0, Change: Change{Requests: 3, Burst: 3}, Want: owing(1, allowed(0, 500*ms))},
			// Charged, they are 1,166,666,666⅔ns at 3 per second, and one
			// more 333,333,333⅓ns.
			{At: 500 * ms, Kind: algorithms.Overdraft, Cost: 1, Want: owing(2, denied(0, 1_500_000_000*ns, 833_333_334*ns))},
		}},
		// The bound on debt: an overdraft of MaxInt64 at MaxRequests per
		// nanosecond is a backlog of 2^31 + (2^31-1)/(2^32-1) ns; the same
		// MaxInt64 requests at 1 per nanosecond would take longer than
		// MaxSpan, and take MaxSpan.
		{Name: "changed rate at the bound on debt", Algorithms: buckets, Requests: maxReq, Period: ns, Burst: maxReq, Steps: []Step{
			{At: 0, Kind: algorithms.Overdraft, Cost: math.MaxInt64, Want: owing(9223372032559808512, denied(0, (1<<31+1)*ns, (1<<31)*ns))},
			{At: 0, Kind: algorithms.Check, Change: Change{Requests: 1, Burst: 1}, Want: owing(9223372036854775806, denied(0, (1<<31+1)*ns, (1<<31+1)*ns))},
			{At: 0, Kind: algorithms.Refund, Cost: 1, Want: owing(4611686018427387902, allowed(0, maxSpan-ns))},
			{At: sec, Kind: algorithms.Check, Want: owing(4611686017427387902, denied(0, maxSpan-sec-ns, maxSpan-sec-ns))},
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
			{At: 0, Kind: algorithms.Overdraft, Cost: 1, Want: queued(2, 500*ms, 0)},
			{At: 0, Kind: algorithms.Overdraft, Cost: 1, Want: queued(1, sec, 500*ms)},
			{At: 0, Kind: algorithms.Overdraft, Cost: 3, Want: owing(2, denied(0, 2500*ms, 1500*ms))},
			{At: 0, Cost: 1, Want: owing(2, denied(0, 2500*ms, 1500*ms))},
			{At: 1500 * ms, Kind: algorithms.Check, Want: allowed(1, sec)},
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

		// The queue keeps its requests: 2 queued at 2 per second (a backlog
		// of 1s) are 500ms at 4 per second.
		{Name: "raised rate keeps the queue", Algorithms: queue, Requests: 2, Period: sec, Burst: 3, Steps: []Step{
			{At: 0, Cost: 1, Want: queued(2, 500*ms, 0)},
			{At: 0, Cost: 1, Want: queued(1, sec, 500*ms)},
			{At: 0, Cost: 1, Change: Change{Requests: 4, Burst: 3}, Want: queued(0, 750*ms, 500*ms)},
			{At: 0, Cost: 1, Want: denied(0, 750*ms, 250*ms)},
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
			{At: 0, Kind: algorithms.Overdraft, Cost: 8, Want: owing(2, denied(0, minute, minute))},
			{At: 30 * sec, Kind: algorithms.Check, Want: owing(2, denied(0, 30*sec, 30*sec))},
			{At: 30 * sec, Kind: algorithms.Refund, Cost: 3, Want: allowed(1, 30*sec)},
			{At: 30 * sec, Kind: algorithms.Check, Want: allowed(1, 30*sec)},
			{At: 30 * sec, Kind: algorithms.Refund, Cost: 100, Want: allowed(10, 0)},
			// The bound: a count of MaxCount.
			{At: minute, Kind: algorithms.Overdraft, Cost: math.MaxInt64, Want: owing(4294967285, denied(0, minute, minute))},
			{At: 2 * minute, Kind: algorithms.Check, Want: allowed(10, 0)},
		}},
		{Name: "admits 2L across a boundary", Algorithms: fixed, Requests: 10, Period: minute, Steps: []Step{
			{At: minute - ns, Cost: 10, Want: allowed(0, ns)},
			{At: minute, Cost: 10, Want: allowed(0, minute)},
		}},

		// A changed limit keeps the window's count: 22 of 10 (an overdraft)
		// leave 18 of 40, and a count above a lowered limit denies until
		// the window ends.
		{Name: "raised limit keeps the count", Algorithms: fixed, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Kind: algorithms.Overdraft, Cost: 22, Want: owing(12, denied(0, minute, minute))},
			{At: 10 * sec, Cost: 0, Change: Change{Requests: 40}, Want: allowed(18, 50*sec)},
			{At: 10 * sec, Cost: 18, Want: allowed(0, 50*sec)},
			{At: 10 * sec, Cost: 1, Want: denied(0, 50*sec, 50*sec)},
			{At: minute, Cost: 0, Want: allowed(40, 0)},
		}},
		{Name: "lowered limit keeps the count", Algorithms: fixed, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Cost: 8, Want: allowed(2, minute)},
			{At: sec, Cost: 1, Change: Change{Requests: 5}, Want: owing(3, denied(0, 59*sec, 59*sec))},
			{At: sec, Kind: algorithms.Check, Want: owing(3, denied(0, 59*sec, 59*sec))},
			{At: minute, Cost: 5, Want: allowed(0, minute)},
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
			{At: 0, Kind: algorithms.Overdraft, Cost: 15, Want: owing(5, denied(0, 2*minute, 84*sec))},
			{At: minute, Kind: algorithms.Check, Want: owing(5, denied(0, minute, 24*sec))},
			{At: minute + 24*sec, Kind: algorithms.Check, Want: allowed(1, 36*sec)},
			{At: minute + 24*sec, Cost: 1, Want: allowed(0, 96*sec)},
			// Back off the current window's count first, then the previous.
			{At: minute + 24*sec, Kind: algorithms.Refund, Cost: 3, Want: allowed(2, 36*sec)},
			{At: minute + 24*sec, Kind: algorithms.Refund, Cost: math.MaxInt64, Want: allowed(10, 0)},
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
		// Both counts are kept. 10 of 10 per minute weigh 10·(P-e)/P in the
		// next window: at 20 per minute, 10 more fit at once, and the next
		// once the weight is at most 9, 6s later.
		{Name: "raised limit keeps the counts", Algorithms: sliding, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Cost: 10, Want: allowed(0, 2*minute)},
			{At: minute, Cost: 0, Change: Change{Requests: 20}, Want: allowed(10, minute)},
			{At: minute, Cost: 10, Want: allowed(0, 2*minute)},
			{At: minute, Cost: 1, Want: denied(0, 2*minute, 6*sec)},
		}},
		// 8 above a lowered 5: a cost of 1 fits once 8·(P-e)/P ≤ 4, at e =
		// 30s into the next window.
		{Name: "lowered limit keeps the counts", Algorithms: sliding, Requests: 10, Period: minute, Steps: []Step{
			{At: 0, Cost: 8, Want: allowed(2, 2*minute)},
			{At: 30 * sec, Cost: 1, Change: Change{Requests: 5}, Want: owing(3, denied(0, 90*sec, minute))},
			{At: 90*sec - ns, Cost: 1, Want: denied(0, 30*sec+ns, ns)},
			{At: 90 * sec, Cost: 1, Want: allowed(0, 90*sec)},
		}},

		// Concurrency: 3 in flight, a lease of 60s, generations of G = 10s
		// from Start. A unit charged in [j·G, (j+1)·G) expires at
		// (j+1)·G - 1ns + 60s; a refund releases the oldest units first.
		{Name: "3 in flight, lease 60s", Algorithms: conc, Requests: 3, Period: minute, Steps: []Step{
			{At: 0, Cost: 1, Want: allowed(2, 70*sec-ns)},
			{At: 5 * sec, Cost: 2, Want: allowed(0, 65*sec-ns)},
			{At: 5 * sec, Cost: 1, Want: denied(0, 65*sec-ns, 65*sec-ns)},
			{At: 5 * sec, Cost: 4, Want: overCapacity(0, 65*sec-ns)},
			{At: 15 * sec, Cost: 1, Want: denied(0, 55*sec-ns, 55*sec-ns)},
			{At: 15 * sec, Kind: algorithms.Refund, Cost: 1, Want: allowed(1, 55*sec-ns)},
			// A unit of generation 1: the state's last unit expires at 80s-1ns.
			{At: 15 * sec, Cost: 1, Want: allowed(0, 65*sec-ns)},
			// The two units of generation 0 expire at 70s-1ns, not sooner.
			{At: 70*sec - 2*ns, Kind: algorithms.Check, Want: denied(0, 10*sec+ns, ns)},
			{At: 70*sec - 2*ns, Cost: 1, Want: denied(0, 10*sec+ns, ns)},
			{At: 70*sec - ns, Cost: 1, Want: allowed(1, minute)},
			{At: 70*sec - ns, Cost: 0, Want: allowed(1, minute)},
		}},
		// Units six generations apart: the older expires at the last
		// nanosecond of the newer one's generation, 70s-1ns.
		{Name: "the oldest generation expires in the newest", Algorithms: conc, Requests: 3, Period: minute, Steps: []Step{
			{At: 0, Cost: 1, Want: allowed(2, 70*sec-ns)},
			{At: minute, Cost: 1, Want: allowed(1, 70*sec-ns)},
			{At: 70*sec - 2*ns, Cost: 2, Want: denied(1, minute+ns, ns)},
			{At: 70*sec - ns, Cost: 1, Want: allowed(1, minute)},
		}},
		// A lease of 6ns: generations of 1ns. An overdraft goes into debt,
		// releases never go below zero.
		{Name: "overdraft and release below zero", Algorithms: conc, Requests: 2, Period: 6 * ns, Steps: []Step{
			{At: 0, Kind: algorithms.Overdraft, Cost: 5, Want: owing(3, denied(0, 6*ns, 6*ns))},
			{At: 0, Kind: algorithms.Check, Want: owing(3, denied(0, 6*ns, 6*ns))},
			{At: 0, Kind: algorithms.Refund, Cost: 3, Want: allowed(0, 6*ns)},
			{At: 0, Kind: algorithms.Refund, Cost: 100, Want: allowed(2, 0)},
			{At: 0, Kind: algorithms.Refund, Cost: 1, Want: allowed(2, 0)},
			{At: 3 * ns, Cost: 2, Want: allowed(0, 6*ns)},
			{At: 8 * ns, Cost: 1, Want: denied(0, ns, ns)},
			{At: 9 * ns, Cost: 1, Want: allowed(1, 6*ns)},
			{At: 9 * ns, Cost: 3, Want: overCapacity(1, 6*ns)},
			{At: 9 * ns, Kind: algorithms.Overdraft, Cost: math.MaxInt64, Want: owing(65533, denied(0, 6*ns, 6*ns))},
		}},
		// A now before the newest generation is charged into it: its unit
		// expires with the newest, never sooner (at 100s-1ns both have).
		{Name: "concurrency clock going back", Algorithms: conc, Requests: 2, Period: minute, Steps: []Step{
			{At: 30 * sec, Cost: 1, Want: allowed(1, 70*sec-ns)},
			{At: 5 * sec, Cost: 1, Want: allowed(0, 95*sec-ns)},
			{At: 5 * sec, Cost: 1, Want: denied(0, 95*sec-ns, 95*sec-ns)},
			{At: 100*sec - ns, Cost: 2, Want: allowed(0, minute)},
		}},
		// The largest limit at the latest time: MaxInFlight units, a lease
		// of MaxLease (generations of a day).
		{Name: "MaxInFlight and MaxLease at MaxTime", Algorithms: conc, Requests: algorithms.MaxInFlight, Period: algorithms.MaxLease, Steps: []Step{
			{At: atMaxTime, Cost: algorithms.MaxInFlight, Want: allowed(0, 518781572612096*ns)},
			{At: atMaxTime, Cost: 1, Want: denied(0, 518781572612096*ns, 518781572612096*ns)},
			{At: atMaxTime, Kind: algorithms.Refund, Cost: algorithms.MaxInFlight - 1, Want: allowed(algorithms.MaxInFlight-1, 518781572612096*ns)},
			{At: atMaxTime, Kind: algorithms.Refund, Cost: math.MaxInt64, Want: allowed(algorithms.MaxInFlight, 0)},
		}},
	}
}
