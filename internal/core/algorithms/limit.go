package algorithms

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Algorithm names one of the decision rules of this package.
type Algorithm uint8

const (
	// FixedWindow counts hits in windows of one period aligned to multiples
	// of the period since the Unix epoch.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow weighs the previous window's count by its overlap with
	// the sliding interval that ends now.
	SlidingWindow
	// TokenBucket refills continuously at the rate up to the capacity.
	TokenBucket
	// LeakyBucket is a meter: a level that drains at the rate; a request
	// that would overflow the capacity is denied.
	LeakyBucket
	// LeakyBucketQueue shapes: admitted requests leave at the constant rate,
	// each told how long to wait; denied only when the queue is full.
	LeakyBucketQueue
	// Concurrency counts units in flight: charged and not yet given back
	// by a refund, up to Requests at once; a unit never given back expires
	// a lease (Period) after it was charged.
	Concurrency
)

var algorithmNames = [...]string{
	FixedWindow:      "fixed_window",
	SlidingWindow:    "sliding_window",
	TokenBucket:      "token_bucket",
	LeakyBucket:      "leaky_bucket",
	LeakyBucketQueue: "leaky_bucket_queue",
	Concurrency:      "concurrency",
}

// String returns the policy-file name of a: "fixed_window",
// "sliding_window", "token_bucket", "leaky_bucket", "leaky_bucket_queue"
// or "concurrency".
func (a Algorithm) String() string {
	if a >= FixedWindow && int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Algorithms lists every algorithm in declaration order.
func Algorithms() []Algorithm {
	return []Algorithm{FixedWindow, SlidingWindow, TokenBucket, LeakyBucket, LeakyBucketQueue, Concurrency}
}

// ParseAlgorithm returns the algorithm whose String is name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if algorithmNames[a] == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of fixed_window, sliding_window, token_bucket, leaky_bucket, leaky_bucket_queue, concurrency)", name)
}

// usesBurst reports whether the algorithm has a capacity separate from its
// rate. Windows admit at most Requests per window; buckets hold Burst.
func (a Algorithm) usesBurst() bool {
	return a == TokenBucket || a == LeakyBucket || a == LeakyBucketQueue
}

// Bounds on a Limit. They keep every intermediate of the arithmetic inside
// 64 bits (or the 128-bit products of math/bits) for any reachable time.
const (
	// MaxRequests is the largest Requests or Burst: Envoy's requests_per_unit
	// is a uint32, and counts are kept in 32 bits.
	MaxRequests = math.MaxUint32
	// MaxSpan bounds Period and the time a full bucket takes to drain
	// (Capacity × Period / Requests): about 146 years. A sliding_window's
	// Period is at most MaxSpan/2, as its counts take two periods to decay.
	MaxSpan = time.Duration(1 << 62)
	// MaxTime is the latest now that Decide distinguishes: 2^62-1 ns after
	// the Unix epoch, in February 2116. Decide takes a now above MaxTime as
	// MaxTime and a negative now as 0, so that a time plus any span fits
	// in an int64.
	MaxTime = math.MaxInt64 - int64(MaxSpan)
)

// MaxLease is the longest lease (Period) of a Concurrency limit: 6 days.
// It keeps every time a Concurrency state holds, relative to now, below
// 2^50 ns (a lease plus a generation), so that the Redis store's scripts
// decide it on plain doubles, exactly; a longer lease serves no purpose a
// lease has (a unit of a crashed caller would be held for a week).
const MaxLease = 144 * time.Hour

// MaxCount is the most hits a window's count holds: an Overdraft that would
// take a count past it leaves it at MaxCount (the counts are 32 bits).
const MaxCount = math.MaxUint32

// addCount returns count + cost, at most MaxCount (count ≤ MaxCount).
func addCount(count, cost int64) int64 {
	if cost > MaxCount-count {
		return MaxCount
	}
	return count + cost
}

// Limit is one rate limit: an algorithm, a rate of Requests per Period kept
// as an exact rational, and a capacity. A Limit is immutable; build it with
// NewLimit. The zero Limit is not valid.
type Limit struct {
	alg      Algorithm
	requests int64 // R, the rate's numerator, 1..MaxRequests
	period   int64 // P nanoseconds, the rate's denominator, 1..MaxSpan
	capacity int64 // Burst for buckets, Requests for windows

	// Precomputed for the buckets (GCRA), as rationals with denominator R:
	// the emission interval I = P/R = intervalNs + intervalFrac/R, the
	// capacity span C = capacity·P/R = spanNs + spanFrac/R, and C - I =
	// oneNs + oneFrac/R, the most backlog that admits a cost of 1.
	intervalNs, intervalFrac int64
	spanNs, spanFrac         int64
	oneNs, oneFrac           int64

	// gen is Concurrency's generation G = ceil(Period/(Generations-1)).
	gen int64
}

// NewLimit returns a Limit admitting requests per period with the given
// algorithm. burst is the capacity of the bucket algorithms (token_bucket,
// leaky_bucket, leaky_bucket_queue); 0 means requests. The window
// algorithms admit requests per window and reject a non-zero burst.
//
// For concurrency, requests is the most units in flight at once (at most
// MaxInFlight) and period the lease after which a unit never given back
// expires (at most MaxLease); it takes no burst.
//
// requests and burst must be at most MaxRequests; period must be positive
// and at most MaxSpan (MaxSpan/2 for sliding_window), and so must the time
// a full bucket takes to drain.
func NewLimit(alg Algorithm, requests int64, period time.Duration, burst int64) (Limit, error) {
	switch {
	case alg < FixedWindow || int(alg) >= len(algorithmNames):
		return Limit{}, fmt.Errorf("unknown algorithm %d", alg)
	case requests <= 0:
		return Limit{}, errors.New("requests must be positive")
	case requests > MaxRequests:
		return Limit{}, fmt.Errorf("requests must be at most %d", int64(MaxRequests))
	case period <= 0:
		return Limit{}, errors.New("period must be positive")
	case period > MaxSpan:
		return Limit{}, fmt.Errorf("period must be at most %v", MaxSpan)
	case burst < 0:
		return Limit{}, errors.New("burst must not be negative")
	case burst > MaxRequests:
		return Limit{}, fmt.Errorf("burst must be at most %d", int64(MaxRequests))
	case burst != 0 && !alg.usesBurst():
		return Limit{}, fmt.Errorf("burst does not apply to %v (a window admits requests per period)", alg)
	case alg == SlidingWindow && period > MaxSpan/2:
		return Limit{}, fmt.Errorf("period of a sliding_window must be at most %v", MaxSpan/2)
	case alg == Concurrency && requests > MaxInFlight:
		return Limit{}, fmt.Errorf("the limit of a concurrency must be at most %d units in flight", MaxInFlight)
	case alg == Concurrency && period > MaxLease:
		return Limit{}, fmt.Errorf("the lease of a concurrency must be at most %v", MaxLease)
	}
	capacity := requests
	if burst != 0 {
		capacity = burst
	}
	l := Limit{alg: alg, requests: requests, period: int64(period), capacity: capacity}
	if alg == Concurrency {
		l.gen = (int64(period) + Generations - 2) / (Generations - 1)
	}
	l.intervalNs, l.intervalFrac = l.times(1)
	hi, lo := bits.Mul64(uint64(capacity), uint64(period))
	if hi >= uint64(requests) {
		return Limit{}, fmt.Errorf("a full bucket drains in over %v; lower burst or raise the rate", MaxSpan)
	}
	q, r := bits.Div64(hi, lo, uint64(requests))
	if q > uint64(MaxSpan) || q == uint64(MaxSpan) && r != 0 {
		return Limit{}, fmt.Errorf("a full bucket drains in over %v; lower burst or raise the rate", MaxSpan)
	}
	l.spanNs, l.spanFrac = int64(q), int64(r)
	l.oneNs, l.oneFrac = l.spanNs-l.intervalNs, l.spanFrac-l.intervalFrac
	if l.oneFrac < 0 {
		l.oneNs, l.oneFrac = l.oneNs-1, l.oneFrac+l.requests
	}
	return l, nil
}

// times returns n·P/R as whole nanoseconds and a remainder over R.
// n must be at most the capacity, so the result is at most MaxSpan.
func (l *Limit) times(n int64) (ns, frac int64) {
	hi, lo := bits.Mul64(uint64(n), uint64(l.period))
	q, r := bits.Div64(hi, lo, uint64(l.requests))
	return int64(q), int64(r)
}

// Times returns n·Period/Requests — the time n requests take at the
// limit's rate — exactly, as whole nanoseconds and a remainder over
// Requests: n·Period = ns·Requests + frac, 0 ≤ frac < Requests. n must be
// between 0 and Capacity, so that ns is at most MaxSpan; the buckets'
// arithmetic uses it for the capacity span and a charge's cost.
func (l *Limit) Times(n int64) (ns, frac int64) { return l.times(n) }

// Algorithm returns the limit's algorithm.
func (l *Limit) Algorithm() Algorithm { return l.alg }

// Requests returns the rate's numerator: requests admitted per Period.
func (l *Limit) Requests() int64 { return l.requests }

// Period returns the rate's denominator.
func (l *Limit) Period() time.Duration { return time.Duration(l.period) }

// Capacity returns the largest cost that can ever be admitted: Burst for
// the bucket algorithms (Requests when no burst was given), Requests for
// the window algorithms and concurrency.
func (l *Limit) Capacity() int64 { return l.capacity }

// Burst returns the capacity of a bucket algorithm and 0 for a window or
// a concurrency.
func (l *Limit) Burst() int64 {
	if l.alg.usesBurst() {
		return l.capacity
	}
	return 0
}
