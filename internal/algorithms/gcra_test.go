package algorithms

import (
	"testing"
	"time"
)

const (
	ns   = time.Nanosecond
	ms   = time.Millisecond
	sec  = time.Second
	day  = 24 * time.Hour
	year = 365 * day
)

// The token bucket and the leaky bucket meter are one algorithm: every
// table here runs against both and must read the same.
func TestTokenBucketAndMeter(t *testing.T) {
	tests := []struct {
		name     string
		requests int64
		period   time.Duration
		burst    int64
		steps    []step
	}{{
		name: "5 per second, burst 5: starts full, refills 1 per 200ms", requests: 5, period: sec, burst: 5,
		steps: []step{
			{at: 0, cost: 0, want: allowed(5, 0)},
			{at: 0, cost: 1, want: allowed(4, 200*ms)},
			{at: 0, cost: 4, want: allowed(0, sec)},
			{at: 0, cost: 1, want: denied(0, sec, 200*ms)},
			{at: 200*ms - ns, cost: 1, want: denied(0, 800*ms+ns, ns)},
			{at: 200 * ms, cost: 1, want: allowed(0, sec)},
			{at: 700 * ms, cost: 0, want: allowed(2, 500*ms)},
			{at: 700 * ms, cost: 6, want: overCapacity(2, 500*ms)},
			{at: 700 * ms, cost: 5, want: denied(2, 500*ms, 500*ms)},
			{at: 1200 * ms, cost: 5, want: allowed(0, sec)},
			{at: 1200*ms + 10*year, cost: 1, want: allowed(4, 200*ms)},
		},
	}, {
		name: "5 per second, burst 10: burst above the rate", requests: 5, period: sec, burst: 10,
		steps: []step{
			{at: 0, cost: 10, want: allowed(0, 2*sec)},
			{at: sec, cost: 6, want: denied(5, sec, 200*ms)},
			{at: sec, cost: 5, want: allowed(0, 2*sec)},
		},
	}, {
		// A third of the way into a period a third of the refill is there:
		// I = 333,333,333⅓ns, so the first token is back after
		// 333,333,334ns, not 333,333,333ns; at 1s exactly two more are.
		name: "3 per second: continuous, exact refill", requests: 3, period: sec, burst: 3,
		steps: []step{
			{at: 0, cost: 3, want: allowed(0, sec)},
			{at: 333_333_333 * ns, cost: 1, want: denied(0, 666_666_667*ns, ns)},
			{at: 333_333_334 * ns, cost: 1, want: allowed(0, sec)},
			{at: sec, cost: 0, want: allowed(2, 333_333_334*ns)},
			{at: sec, cost: 3, want: denied(2, 333_333_334*ns, 333_333_334*ns)},
			{at: sec, cost: 2, want: allowed(0, sec)},
		},
	}, {
		name: "burst 1: one at a time", requests: 10, period: sec, burst: 1,
		steps: []step{
			{at: 0, cost: 1, want: allowed(0, 100*ms)},
			{at: 40 * ms, cost: 1, want: denied(0, 60*ms, 60*ms)},
			{at: 40 * ms, cost: 2, want: overCapacity(0, 60*ms)},
			{at: 100 * ms, cost: 1, want: allowed(0, 100*ms)},
		},
	}, {
		// TAT is 12s after the first step; a now of 9s sees a backlog of 3s
		// where 10s saw 2s: less room, never more.
		name: "clock going back", requests: 1, period: sec, burst: 2,
		steps: []step{
			{at: 10 * sec, cost: 2, want: allowed(0, 2*sec)},
			{at: 9 * sec, cost: 1, want: denied(0, 3*sec, 2*sec)},
			{at: 9 * sec, cost: 0, want: allowed(0, 3*sec)},
			{at: 11 * sec, cost: 1, want: allowed(0, 2*sec)},
			{at: 5 * sec, cost: 0, want: allowed(0, 8*sec)},
			{at: 13 * sec, cost: 0, want: allowed(2, 0)},
		},
	}, {
		name: "1 per day", requests: 1, period: day, burst: 1,
		steps: []step{
			{at: 0, cost: 1, want: allowed(0, day)},
			{at: day - ns, cost: 1, want: denied(0, ns, ns)},
			{at: day, cost: 1, want: allowed(0, day)},
			{at: 30 * year, cost: 1, want: allowed(0, day)},
		},
	}, {
		name: "1e9 per second: 1ns apart", requests: 1e9, period: sec, burst: 1e9,
		steps: []step{
			{at: 0, cost: 1e9, want: allowed(0, sec)},
			{at: ns, cost: 2, want: denied(1, sec-ns, ns)},
			{at: ns, cost: 1, want: allowed(0, sec)},
			{at: 500 * ms, cost: 0, want: allowed(499_999_999, 500*ms+ns)},
			{at: sec + ns, cost: 0, want: allowed(1e9, 0)},
		},
	}, {
		name: "MaxRequests per nanosecond", requests: MaxRequests, period: ns, burst: MaxRequests,
		steps: []step{
			{at: 0, cost: MaxRequests, want: allowed(0, ns)},
			{at: 0, cost: 1, want: denied(0, ns, ns)},
			{at: ns, cost: MaxRequests + 1, want: overCapacity(MaxRequests, 0)},
			{at: ns, cost: 1, want: allowed(MaxRequests-1, ns)},
		},
	}, {
		// The longest span at the latest time: TAT reaches math.MaxInt64.
		name: "MaxSpan at MaxTime", requests: MaxRequests, period: MaxSpan, burst: MaxRequests,
		steps: []step{
			{at: time.Duration(MaxTime - t0), cost: MaxRequests, want: allowed(0, MaxSpan)},
			{at: time.Duration(MaxTime - t0), cost: 1, want: denied(0, MaxSpan, MaxSpan/MaxRequests+1)},
			// Past MaxTime the clock stands still.
			{at: time.Duration(MaxTime-t0) + year, cost: 0, want: allowed(0, MaxSpan)},
		},
	}}
	for _, tt := range tests {
		for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
			t.Run(alg.String()+"/"+tt.name, func(t *testing.T) {
				runSteps(t, mustLimit(t, alg, tt.requests, tt.period, tt.burst), tt.steps)
			})
		}
	}
}

func TestLeakyBucketQueue(t *testing.T) {
	tests := []struct {
		name     string
		requests int64
		period   time.Duration
		burst    int64
		steps    []step
	}{{
		// Admitted requests leave 500ms apart, the first at once; the
		// queue holds 3, the one leaving now included.
		name: "2 per second, queue of 3", requests: 2, period: sec, burst: 3,
		steps: []step{
			{at: 0, cost: 1, want: queued(2, 500*ms, 0)},
			{at: 0, cost: 1, want: queued(1, sec, 500*ms)},
			{at: 0, cost: 1, want: queued(0, 1500*ms, sec)},
			{at: 0, cost: 1, want: denied(0, 1500*ms, 500*ms)},
			{at: 100 * ms, cost: 1, want: denied(0, 1400*ms, 400*ms)},
			{at: 500 * ms, cost: 1, want: queued(0, 1500*ms, sec)},
			{at: 3 * sec, cost: 1, want: queued(2, 500*ms, 0)},
			{at: 3 * sec, cost: 2, want: queued(0, 1500*ms, 500*ms)},
			{at: 3 * sec, cost: 0, want: allowed(0, 1500*ms)},
			{at: 3 * sec, cost: 4, want: overCapacity(0, 1500*ms)},
			{at: 3*sec + 10*year, cost: 3, want: queued(0, 1500*ms, 0)},
		},
	}, {
		// Delays round up: a request never leaves before its turn.
		name: "3 per second: delays are exact, rounded up", requests: 3, period: sec, burst: 3,
		steps: []step{
			{at: 0, cost: 1, want: queued(2, 333_333_334*ns, 0)},
			{at: 0, cost: 1, want: queued(1, 666_666_667*ns, 333_333_334*ns)},
			{at: 0, cost: 1, want: queued(0, sec, 666_666_667*ns)},
		},
	}, {
		name: "queue of 1 never delays", requests: 10, period: sec, burst: 1,
		steps: []step{
			{at: 0, cost: 1, want: queued(0, 100*ms, 0)},
			{at: 50 * ms, cost: 1, want: denied(0, 50*ms, 50*ms)},
			{at: 100 * ms, cost: 1, want: queued(0, 100*ms, 0)},
		},
	}, {
		name: "clock going back delays longer", requests: 1, period: sec, burst: 3,
		steps: []step{
			{at: 10 * sec, cost: 1, want: queued(2, sec, 0)},
			{at: 9 * sec, cost: 1, want: queued(0, 3*sec, 2*sec)},
			{at: 9 * sec, cost: 1, want: denied(0, 3*sec, sec)},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, mustLimit(t, LeakyBucketQueue, tt.requests, tt.period, tt.burst), tt.steps)
		})
	}
}

// "5 per second" and "1 per 200ms" are one rate; so are 7 per 3s and 14 per
// 6s, whose interval 428,571,428 4/7 ns is not whole. Every decision agrees.
func TestBucketRateIsARational(t *testing.T) {
	pairs := []struct {
		r1 int64
		p1 time.Duration
		r2 int64
		p2 time.Duration
	}{
		{5, sec, 1, 200 * ms},
		{7, 3 * sec, 14, 6 * sec},
		{1e9, sec, 1, ns},
	}
	for _, pair := range pairs {
		for _, alg := range []Algorithm{TokenBucket, LeakyBucket, LeakyBucketQueue} {
			a := mustLimit(t, alg, pair.r1, pair.p1, 4)
			b := mustLimit(t, alg, pair.r2, pair.p2, 4)
			interval := pair.p1 / time.Duration(pair.r1)
			rng := newRand(uint64(pair.r1))
			var sa, sb State
			now := t0
			for i := range 20000 {
				now += rng.Int64N(int64(interval) * 2)
				cost := rng.Int64N(6)
				var da, db Decision
				sa, da = a.Decide(sa, now, cost)
				sb, db = b.Decide(sb, now, cost)
				if da != db {
					t.Fatalf("%v %d per %v vs %d per %v, decision %d: %+v vs %+v", alg, pair.r1, pair.p1, pair.r2, pair.p2, i, da, db)
				}
			}
		}
	}
}
