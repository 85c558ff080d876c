// Package storetest is the conformance suite of store.Store: one set of
// tests that every store (memory, redis) runs from its own _test.go files
// with Run, so that they all give the same answers.
//
// The suite drives a store on a fake timeline — the store must decide at
// the Fake clock's time — and checks it three ways: against decisions
// written out by hand (the edge cases of internal/algorithms' own tables,
// from the longest period at the latest time to 10^9 per second and
// clocks going back), against store.Settle applied directly to a map of
// states on long random timelines of multi-charge requests, and under
// concurrent requests on one bucket (exactly the bound admitted).
package storetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// Factory returns a new store holding no bucket, that reads the time from
// c. Stores from separate calls must not share buckets.
type Factory func(t *testing.T, c *clock.Fake) store.Store

// T0 is where the suite's timelines start: 2026-01-01T00:00:00Z in Unix
// nanoseconds, a multiple of every period the tables use (up to a day).
const T0 = int64(1_767_225_600_000_000_000)

// Domain is the domain of every charge the suite makes: a store that keeps
// a domain's buckets together (a Redis Cluster hash slot) settles each of
// the suite's requests in one place, as it would the engine's.
const Domain = "conformance"

// Options tune the suite to a store's speed.
type Options struct {
	// RandomRequests is how many requests each random timeline makes
	// (0: 2000).
	RandomRequests int
}

// Run runs the whole suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory, opts Options) {
	if opts.RandomRequests == 0 {
		opts.RandomRequests = 2000
	}
	t.Run("EdgeCases", func(t *testing.T) { EdgeCases(t, newStore) })
	t.Run("AllOrNothing", func(t *testing.T) { AllOrNothing(t, newStore) })
	t.Run("Keys", func(t *testing.T) { Keys(t, newStore) })
	t.Run("RandomTimelines", func(t *testing.T) { RandomTimelines(t, newStore, opts.RandomRequests) })
	t.Run("ConcurrentOneKey", func(t *testing.T) { ConcurrentOneKey(t, newStore) })
}

const (
	ns   = time.Nanosecond
	ms   = time.Millisecond
	sec  = time.Second
	day  = 24 * time.Hour
	year = 365 * day
)

// step is one request of one charge on a fake timeline, at T0+at.
type step struct {
	at   time.Duration
	cost int64
	want algorithms.Decision
}

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

type edgeCase struct {
	name     string
	algs     []algorithms.Algorithm
	requests int64
	period   time.Duration
	burst    int64
	steps    []step
}

var (
	buckets = []algorithms.Algorithm{algorithms.TokenBucket, algorithms.LeakyBucket}
	queue   = []algorithms.Algorithm{algorithms.LeakyBucketQueue}
	fixed   = []algorithms.Algorithm{algorithms.FixedWindow}
	sliding = []algorithms.Algorithm{algorithms.SlidingWindow}
)

const (
	maxReq   = algorithms.MaxRequests
	maxSpan  = algorithms.MaxSpan
	atMaxNow = time.Duration(algorithms.MaxTime - T0)
)

// edgeCases are internal/algorithms' own tables, decision for decision.
var edgeCases = []edgeCase{
	{name: "5 per second, burst 5", algs: buckets, requests: 5, period: sec, burst: 5, steps: []step{
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
	}},
	{name: "5 per second, burst 10", algs: buckets, requests: 5, period: sec, burst: 10, steps: []step{
		{at: 0, cost: 10, want: allowed(0, 2*sec)},
		{at: sec, cost: 6, want: denied(5, sec, 200*ms)},
		{at: sec, cost: 5, want: allowed(0, 2*sec)},
	}},
	{name: "3 per second, exact refill", algs: buckets, requests: 3, period: sec, burst: 3, steps: []step{
		{at: 0, cost: 3, want: allowed(0, sec)},
		{at: 333_333_333 * ns, cost: 1, want: denied(0, 666_666_667*ns, ns)},
		{at: 333_333_334 * ns, cost: 1, want: allowed(0, sec)},
		{at: sec, cost: 0, want: allowed(2, 333_333_334*ns)},
		{at: sec, cost: 3, want: denied(2, 333_333_334*ns, 333_333_334*ns)},
		{at: sec, cost: 2, want: allowed(0, sec)},
	}},
	{name: "7 per 3s: an interval of 428,571,428 4/7 ns", algs: buckets, requests: 7, period: 3 * sec, burst: 7, steps: []step{
		{at: 0, cost: 7, want: allowed(0, 3*sec)},
		{at: 428_571_428 * ns, cost: 1, want: denied(0, 2_571_428_572*ns, ns)},
		{at: 428_571_429 * ns, cost: 1, want: allowed(0, 3*sec)},
		{at: 3 * sec, cost: 0, want: allowed(6, 428_571_429*ns)},
		{at: 3 * sec, cost: 7, want: denied(6, 428_571_429*ns, 428_571_429*ns)},
	}},
	{name: "clock going back", algs: buckets, requests: 1, period: sec, burst: 2, steps: []step{
		{at: 10 * sec, cost: 2, want: allowed(0, 2*sec)},
		{at: 9 * sec, cost: 1, want: denied(0, 3*sec, 2*sec)},
		{at: 9 * sec, cost: 0, want: allowed(0, 3*sec)},
		{at: 11 * sec, cost: 1, want: allowed(0, 2*sec)},
		{at: 5 * sec, cost: 0, want: allowed(0, 8*sec)},
		{at: 13 * sec, cost: 0, want: allowed(2, 0)},
	}},
	{name: "1 per day", algs: buckets, requests: 1, period: day, burst: 1, steps: []step{
		{at: 0, cost: 1, want: allowed(0, day)},
		{at: day - ns, cost: 1, want: denied(0, ns, ns)},
		{at: day, cost: 1, want: allowed(0, day)},
		{at: 30 * year, cost: 1, want: allowed(0, day)},
	}},
	{name: "1e9 per second", algs: buckets, requests: 1e9, period: sec, burst: 1e9, steps: []step{
		{at: 0, cost: 1e9, want: allowed(0, sec)},
		{at: ns, cost: 2, want: denied(1, sec-ns, ns)},
		{at: ns, cost: 1, want: allowed(0, sec)},
		{at: 500 * ms, cost: 0, want: allowed(499_999_999, 500*ms+ns)},
		{at: sec + ns, cost: 0, want: allowed(1e9, 0)},
	}},
	{name: "MaxRequests per nanosecond", algs: buckets, requests: maxReq, period: ns, burst: maxReq, steps: []step{
		{at: 0, cost: maxReq, want: allowed(0, ns)},
		{at: 0, cost: 1, want: denied(0, ns, ns)},
		{at: ns, cost: maxReq + 1, want: overCapacity(maxReq, 0)},
		{at: ns, cost: 1, want: allowed(maxReq-1, ns)},
	}},
	{name: "MaxSpan at MaxTime", algs: buckets, requests: maxReq, period: maxSpan, burst: maxReq, steps: []step{
		{at: atMaxNow, cost: maxReq, want: allowed(0, maxSpan)},
		{at: atMaxNow, cost: 1, want: denied(0, maxSpan, maxSpan/maxReq+1)},
		{at: atMaxNow + year, cost: 0, want: allowed(0, maxSpan)},
	}},
	{name: "a cost of MaxInt64", algs: buckets, requests: 10, period: sec, burst: 10, steps: []step{
		{at: 0, cost: math.MaxInt64, want: overCapacity(10, 0)},
		{at: 0, cost: -5, want: allowed(10, 0)},
		{at: 0, cost: 10, want: allowed(0, sec)},
	}},
	{name: "queue: 2 per second, queue of 3", algs: queue, requests: 2, period: sec, burst: 3, steps: []step{
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
	}},
	{name: "queue: 3 per second, delays rounded up", algs: queue, requests: 3, period: sec, burst: 3, steps: []step{
		{at: 0, cost: 1, want: queued(2, 333_333_334*ns, 0)},
		{at: 0, cost: 1, want: queued(1, 666_666_667*ns, 333_333_334*ns)},
		{at: 0, cost: 1, want: queued(0, sec, 666_666_667*ns)},
	}},
	{name: "queue: clock going back delays longer", algs: queue, requests: 1, period: sec, burst: 3, steps: []step{
		{at: 10 * sec, cost: 1, want: queued(2, sec, 0)},
		{at: 9 * sec, cost: 1, want: queued(0, 3*sec, 2*sec)},
		{at: 9 * sec, cost: 1, want: denied(0, 3*sec, sec)},
	}},
	{name: "fixed: 10 per minute", algs: fixed, requests: 10, period: time.Minute, steps: []step{
		{at: 0, cost: 0, want: allowed(10, 0)},
		{at: 0, cost: 4, want: allowed(6, time.Minute)},
		{at: 30 * sec, cost: 6, want: allowed(0, 30*sec)},
		{at: 30 * sec, cost: 1, want: denied(0, 30*sec, 30*sec)},
		{at: time.Minute - ns, cost: 1, want: denied(0, ns, ns)},
		{at: time.Minute - ns, cost: 11, want: overCapacity(0, ns)},
		{at: time.Minute, cost: 0, want: allowed(10, 0)},
		{at: time.Minute, cost: 10, want: allowed(0, time.Minute)},
		{at: 90 * sec, cost: 0, want: allowed(0, 30*sec)},
		{at: 30 * sec, cost: 1, want: denied(0, 90*sec, 90*sec)},
		{at: 30 * sec, cost: 0, want: allowed(0, 90*sec)},
		{at: 2 * time.Minute, cost: 1, want: allowed(9, time.Minute)},
		{at: 2*time.Minute + 10*year, cost: 1, want: allowed(9, time.Minute)},
	}},
	{name: "fixed: aligned to the epoch", algs: fixed, requests: 2, period: 7 * sec, steps: []step{
		{at: 3 * sec, cost: 2, want: allowed(0, 4*sec)},
		{at: 7*sec - ns, cost: 1, want: denied(0, ns, ns)},
		{at: 7 * sec, cost: 2, want: allowed(0, 7*sec)},
	}},
	{name: "fixed: 1 per day", algs: fixed, requests: 1, period: day, steps: []step{
		{at: 12 * time.Hour, cost: 1, want: allowed(0, 12*time.Hour)},
		{at: day - ns, cost: 1, want: denied(0, ns, ns)},
		{at: day, cost: 1, want: allowed(0, day)},
	}},
	{name: "fixed: 1e9 per second", algs: fixed, requests: 1e9, period: sec, steps: []step{
		{at: 0, cost: 1e9, want: allowed(0, sec)},
		{at: sec - ns, cost: 1, want: denied(0, ns, ns)},
		{at: sec, cost: 1e9 + 1, want: overCapacity(1e9, 0)},
		{at: sec, cost: 1, want: allowed(1e9-1, sec)},
	}},
	{name: "fixed: MaxSpan at MaxTime", algs: fixed, requests: maxReq, period: maxSpan, steps: []step{
		{at: atMaxNow, cost: maxReq, want: allowed(0, ns)},
		{at: atMaxNow, cost: 1, want: denied(0, ns, ns)},
	}},
	{name: "sliding: 10 per minute", algs: sliding, requests: 10, period: time.Minute, steps: []step{
		{at: 0, cost: 0, want: allowed(10, 0)},
		{at: 0, cost: 10, want: allowed(0, 2*time.Minute)},
		{at: 59 * sec, cost: 1, want: denied(0, 61*sec, 7*sec)},
		{at: 66*sec - ns, cost: 1, want: denied(0, 54*sec+ns, ns)},
		{at: 66 * sec, cost: 1, want: allowed(0, 114*sec)},
		{at: 72 * sec, cost: 0, want: allowed(1, 108*sec)},
		{at: 72 * sec, cost: 2, want: denied(1, 108*sec, 6*sec)},
		{at: 78 * sec, cost: 2, want: allowed(0, 102*sec)},
		{at: 2 * time.Minute, cost: 0, want: allowed(7, time.Minute)},
		{at: 2 * time.Minute, cost: 11, want: overCapacity(7, time.Minute)},
		{at: 3*time.Minute - ns, cost: 10, want: denied(9, ns, ns)},
		{at: 3 * time.Minute, cost: 10, want: allowed(0, 2*time.Minute)},
		{at: 150 * sec, cost: 1, want: denied(0, 150*sec, 96*sec)},
		{at: 150 * sec, cost: 0, want: allowed(0, 150*sec)},
		{at: 4 * time.Minute, cost: 0, want: allowed(0, time.Minute)},
		{at: 3*time.Minute + 10*year, cost: 1, want: allowed(9, 2*time.Minute)},
	}},
	{name: "sliding: clock going back with a previous count", algs: sliding, requests: 10, period: time.Minute, steps: []step{
		{at: 0, cost: 5, want: allowed(5, 2*time.Minute)},
		{at: time.Minute, cost: 3, want: allowed(2, 2*time.Minute)},
		{at: 30 * sec, cost: 0, want: allowed(2, 150*sec)},
		{at: 30 * sec, cost: 2, want: allowed(0, 150*sec)},
		{at: 30 * sec, cost: 1, want: denied(0, 150*sec, 42*sec)},
		{at: 72 * sec, cost: 1, want: allowed(0, 108*sec)},
	}},
	{name: "sliding: cost = limit", algs: sliding, requests: 4, period: sec, steps: []step{
		{at: 500 * ms, cost: 1, want: allowed(3, 1500*ms)},
		{at: 600 * ms, cost: 4, want: denied(3, 1400*ms, 1400*ms)},
		{at: sec, cost: 4, want: denied(3, sec, sec)},
		{at: 2 * sec, cost: 4, want: allowed(0, 2*sec)},
	}},
	{name: "sliding: 1 per day", algs: sliding, requests: 1, period: day, steps: []step{
		{at: 0, cost: 1, want: allowed(0, 2*day)},
		{at: day, cost: 1, want: denied(0, day, day)},
		{at: 36 * time.Hour, cost: 1, want: denied(0, 12*time.Hour, 12*time.Hour)},
		{at: 2 * day, cost: 1, want: allowed(0, 2*day)},
	}},
	{name: "sliding: 1e9 per second", algs: sliding, requests: 1e9, period: sec, steps: []step{
		{at: 0, cost: 1e9, want: allowed(0, 2*sec)},
		{at: sec + 250*ms, cost: 0, want: allowed(250e6, 750*ms)},
		{at: sec + 250*ms, cost: 250e6 + 1, want: denied(250e6, 750*ms, ns)},
		{at: sec + 250*ms, cost: 250e6, want: allowed(0, 1750*ms)},
	}},
	{name: "sliding: longest period at MaxTime", algs: sliding, requests: maxReq, period: maxSpan / 2, steps: []step{
		{at: atMaxNow, cost: maxReq, want: allowed(0, maxSpan/2+ns)},
		{at: atMaxNow, cost: 1, want: denied(0, maxSpan/2+ns, (1<<29+2)*ns)},
	}},
	{name: "sliding: within L+⌊L·d/P⌋ at a boundary", algs: sliding, requests: 100, period: 100 * ns, steps: []step{
		{at: 99 * ns, cost: 100, want: allowed(0, 101*ns)},
		{at: 100 * ns, cost: 1, want: denied(0, 100*ns, ns)},
		{at: 101 * ns, cost: 1, want: allowed(0, 199*ns)},
		{at: 101 * ns, cost: 1, want: denied(0, 199*ns, ns)},
	}},
}

// EdgeCases decides internal/algorithms' own tables through the store, one
// bucket per table, and checks every decision.
func EdgeCases(t *testing.T, newStore Factory) {
	for _, tc := range edgeCases {
		for _, alg := range tc.algs {
			t.Run(alg.String()+"/"+tc.name, func(t *testing.T) {
				c := clock.NewFake(T0)
				s := newStore(t, c)
				l := mustLimit(t, alg, tc.requests, tc.period, tc.burst)
				for i, st := range tc.steps {
					c.Set(T0 + int64(st.at))
					got := apply(t, s, store.Charge{Domain: Domain, Key: []byte("edge"), Limit: l, Cost: st.cost})
					if got[0] != st.want {
						t.Fatalf("step %d (at %v, cost %d):\n got %+v\nwant %+v", i, st.at, st.cost, got[0], st.want)
					}
				}
			})
		}
	}
}

// AllOrNothing: a request is charged on all its buckets or on none, and a
// denied request reports its admissible charges as peeks.
func AllOrNothing(t *testing.T, newStore Factory) {
	ten := mustLimit(t, algorithms.TokenBucket, 10, time.Minute, 0)
	two := mustLimit(t, algorithms.FixedWindow, 2, time.Minute, 0)
	three := mustLimit(t, algorithms.SlidingWindow, 3, time.Minute, 0)
	charge := func(key string, l *algorithms.Limit, cost int64) store.Charge {
		return store.Charge{Domain: Domain, Key: []byte(key), Limit: l, Cost: cost}
	}
	shadow := func(c store.Charge) store.Charge { c.Shadow = true; return c }
	C := algorithms.Allowed
	D, O := algorithms.Denied, algorithms.OverCapacity

	tests := []struct {
		name      string
		before    []store.Charge // applied first, one request
		charges   []store.Charge
		wantCodes []algorithms.Code
		wantRem   []int64
		after     []int64 // remaining of wide, narrow, third afterwards
	}{{
		name:      "all admitted, all charged",
		charges:   []store.Charge{charge("wide", ten, 1), charge("narrow", two, 1), charge("third", three, 2)},
		wantCodes: []algorithms.Code{C, C, C},
		wantRem:   []int64{9, 1, 1},
		after:     []int64{9, 1, 1},
	}, {
		name:      "one over capacity: none charged, the others report what they hold",
		charges:   []store.Charge{charge("wide", ten, 1), charge("narrow", two, 3), charge("third", three, 1)},
		wantCodes: []algorithms.Code{C, O, C},
		wantRem:   []int64{10, 2, 3},
		after:     []int64{10, 2, 3},
	}, {
		name:      "one denied: none charged",
		before:    []store.Charge{charge("narrow", two, 2)},
		charges:   []store.Charge{charge("wide", ten, 4), charge("narrow", two, 1), charge("third", three, 3)},
		wantCodes: []algorithms.Code{C, D, C},
		wantRem:   []int64{10, 0, 3},
		after:     []int64{10, 0, 3},
	}, {
		name:      "a shadow denial does not block the others",
		before:    []store.Charge{charge("narrow", two, 2)},
		charges:   []store.Charge{charge("wide", ten, 1), shadow(charge("narrow", two, 1)), charge("third", three, 1)},
		wantCodes: []algorithms.Code{C, D, C},
		wantRem:   []int64{9, 0, 2},
		after:     []int64{9, 0, 2},
	}, {
		name:      "an admitted shadow charge is charged",
		charges:   []store.Charge{shadow(charge("wide", ten, 3)), charge("narrow", two, 1)},
		wantCodes: []algorithms.Code{C, C},
		wantRem:   []int64{7, 1},
		after:     []int64{7, 1, 3},
	}, {
		name:      "peeks charge nothing",
		charges:   []store.Charge{charge("wide", ten, 0), charge("narrow", two, 0), charge("third", three, 0)},
		wantCodes: []algorithms.Code{C, C, C},
		wantRem:   []int64{10, 2, 3},
		after:     []int64{10, 2, 3},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, clock.NewFake(T0))
			if tt.before != nil {
				apply(t, s, tt.before...)
			}
			got := apply(t, s, tt.charges...)
			for i := range got {
				if got[i].Code != tt.wantCodes[i] || got[i].Remaining != tt.wantRem[i] {
					t.Errorf("charge %d: got %v remaining %d, want %v remaining %d", i, got[i].Code, got[i].Remaining, tt.wantCodes[i], tt.wantRem[i])
				}
			}
			peek := apply(t, s, charge("wide", ten, 0), charge("narrow", two, 0), charge("third", three, 0))
			for i, want := range tt.after {
				if peek[i].Remaining != want {
					t.Errorf("afterwards bucket %d has %d remaining, want %d", i, peek[i].Remaining, want)
				}
			}
		})
	}
}

// Keys: buckets are told apart by every byte of their keys, braces and
// zero bytes included, and one key's charges never touch another's.
func Keys(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(T0))
	l := mustLimit(t, algorithms.FixedWindow, 3, time.Hour, 0)
	keys := [][]byte{
		[]byte("a"), []byte("a\x00"), []byte("\x00a"), []byte("{a}"), []byte("{a}b"), []byte("}{"),
		[]byte("\x04shop\x04path"), []byte("\x04shop\x04patH"), []byte("\xff\xfe"), {},
	}
	for i, k := range keys {
		for range i % 4 {
			apply(t, s, store.Charge{Domain: Domain, Key: k, Limit: l, Cost: 1})
		}
	}
	for i, k := range keys {
		d := apply(t, s, store.Charge{Domain: Domain, Key: k, Limit: l})
		if want := int64(3 - i%4); d[0].Remaining != want {
			t.Errorf("key %q: %d remaining, want %d", k, d[0].Remaining, want)
		}
	}
}

// reference is store.Settle over a map: the decisions every store must give.
type reference struct{ states map[string]algorithms.State }

func (r *reference) apply(charges []store.Charge, now int64) []algorithms.Decision {
	states := make([]algorithms.State, len(charges))
	for i := range charges {
		states[i] = r.states[string(charges[i].Key)]
	}
	d := make([]algorithms.Decision, len(charges))
	if store.Settle(charges, states, now, d) {
		for i := range charges {
			if charges[i].Cost != 0 && d[i].Code == algorithms.Allowed {
				r.states[string(charges[i].Key)] = states[i]
			}
		}
	}
	return d
}

// RandomTimelines compares the store with store.Settle on random limits
// (every algorithm; rates from 1 per 146 years to 2^32 per nanosecond,
// 7 per 3s among them), random requests of one to four charges (costs
// from 0 to past capacity, some shadow) and random times: steps of a
// nanosecond to years, near the epoch and near MaxTime, and steps back.
func RandomTimelines(t *testing.T, newStore Factory, requests int) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			start := T0
			switch seed {
			case 1:
				start = algorithms.MaxTime - int64(year)
			case 2:
				start = rng.Int64N(int64(year))
			}
			c := clock.NewFake(start)
			s := newStore(t, c)
			ref := &reference{states: make(map[string]algorithms.State)}

			const nKeys = 8
			limits := make([]*algorithms.Limit, nKeys)
			for i := range limits {
				limits[i] = randomLimit(rng)
			}
			now, high := start, start
			for n := range requests {
				now = nextNow(rng, now, high, ref)
				high = max(high, now)
				c.Set(now)
				charges := randomRequest(rng, limits)
				want := ref.apply(charges, now)
				got := apply(t, s, charges...)
				for i := range charges {
					if got[i] != want[i] {
						l := charges[i].Limit
						t.Fatalf("request %d at %d, charge %d (%v %d per %d, capacity %d; cost %d, shadow %v):\n got %+v\nwant %+v",
							n, now, i, l.Algorithm(), l.Requests(), int64(l.Period()), l.Capacity(), charges[i].Cost, charges[i].Shadow, got[i], want[i])
					}
				}
			}
		})
	}
}

func randomLimit(rng *rand.Rand) *algorithms.Limit {
	for {
		alg := algorithms.Algorithms()[rng.IntN(5)]
		var requests int64
		switch rng.IntN(6) {
		case 0:
			requests = 1
		case 1:
			requests = 7
		case 2:
			requests = 1e9
		case 3:
			requests = maxReq
		default:
			requests = 1 + rng.Int64N(1<<(1+rng.IntN(32)))
		}
		var period time.Duration
		switch rng.IntN(6) {
		case 0:
			period = 3 * sec
		case 1:
			period = ns
		case 2:
			period = maxSpan >> rng.IntN(3)
		default:
			period = time.Duration(1 + rng.Int64N(1<<(1+rng.IntN(62))))
		}
		var burst int64
		if alg == algorithms.TokenBucket || alg == algorithms.LeakyBucket || alg == algorithms.LeakyBucketQueue {
			if rng.IntN(2) == 0 {
				burst = 1 + rng.Int64N(min(requests*4, maxReq))
			}
		}
		if l, err := algorithms.NewLimit(alg, requests, period, burst); err == nil {
			return &l
		}
	}
}

func randomRequest(rng *rand.Rand, limits []*algorithms.Limit) []store.Charge {
	n := 1 + rng.IntN(4)
	keys := rng.Perm(len(limits))[:n]
	charges := make([]store.Charge, n)
	for i, k := range keys {
		l := limits[k]
		capacity := l.Capacity()
		var cost int64
		switch rng.IntN(10) {
		case 0:
			cost = 0
		case 1:
			cost = capacity
		case 2:
			cost = capacity + 1 + rng.Int64N(3)
		case 3:
			cost = 1 + rng.Int64N(capacity)
		case 4:
			cost = math.MaxInt64
		default:
			cost = 1 + rng.Int64N(min(capacity, 3))
		}
		charges[i] = store.Charge{Domain: Domain, Key: fmt.Appendf(nil, "key-%d", k), Limit: l, Cost: cost, Shadow: rng.IntN(8) == 0}
	}
	return charges
}

// nextNow steps the timeline: mostly forward by a nanosecond to years,
// sometimes not at all, sometimes back — but never back past a moment at
// which some bucket came to rest, since a store may forget a bucket at
// rest (and the reference does not).
func nextNow(rng *rand.Rand, now, high int64, ref *reference) int64 {
	var next int64
	switch rng.IntN(12) {
	case 0:
		next = now
	case 1, 2:
		next = now - rng.Int64N(1<<(1+rng.IntN(40)))
		for _, st := range ref.states {
			if r := st.RestAt(); r > next && r <= high {
				next = now
				break
			}
		}
	case 3:
		next = now + rng.Int64N(1<<(1+rng.IntN(62)))
	default:
		next = now + rng.Int64N(1<<(1+rng.IntN(36)))
	}
	return min(max(next, 0), algorithms.MaxTime)
}

// ConcurrentOneKey: goroutines charge one bucket at once, half of them
// with a second bucket of their own; exactly the bound is admitted.
func ConcurrentOneKey(t *testing.T, newStore Factory) {
	for _, alg := range algorithms.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, clock.NewFake(T0))
			l := mustLimit(t, alg, 100, time.Hour, 0)
			own := mustLimit(t, algorithms.FixedWindow, 1_000_000, time.Hour, 0)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 12 {
						charges := []store.Charge{{Domain: Domain, Key: []byte("shared"), Limit: l, Cost: 1}}
						if g%2 == 0 {
							charges = append(charges, store.Charge{Domain: Domain, Key: fmt.Appendf(nil, "own-%d", g), Limit: own, Cost: 1})
						}
						d := make([]algorithms.Decision, len(charges))
						if err := s.Apply(context.Background(), charges, d); err != nil {
							t.Error(err)
							return
						}
						if d[0].Code == algorithms.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 100 {
				t.Fatalf("admitted %d of 192, want exactly 100", got)
			}
		})
	}
}

func mustLimit(t testing.TB, alg algorithms.Algorithm, requests int64, period time.Duration, burst int64) *algorithms.Limit {
	t.Helper()
	l, err := algorithms.NewLimit(alg, requests, period, burst)
	if err != nil {
		t.Fatal(err)
	}
	return &l
}

// apply applies charges as one request. Every charge must name its domain,
// as the engine's do.
func apply(t testing.TB, s store.Store, charges ...store.Charge) []algorithms.Decision {
	t.Helper()
	for i, c := range charges {
		if c.Domain == "" {
			t.Fatalf("charge %d (%q) names no domain; the engine names every charge's", i, c.Key)
		}
	}
	d := make([]algorithms.Decision, len(charges))
	if err := s.Apply(context.Background(), charges, d); err != nil {
		t.Fatal(err)
	}
	return d
}
