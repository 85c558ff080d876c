// Package storetest is the conformance suite of store.Store: one set of
// tests that every store (memory, redis) runs from its own _test.go files
// with Run, so that they all give the same answers.
//
// The suite drives a store on a fake timeline — the store must decide at
// the Fake clock's time — and checks it three ways: against decisions
// written out by hand (algotest's cases, which internal/core/algorithms' table
// tests decide too: from the longest period at the latest time to
// MaxRequests per nanosecond, costs up to MaxInt64 and clocks going back),
// against store.Settle applied directly to a map of states on long random
// timelines of multi-charge requests, and under concurrent requests on one
// bucket (exactly the bound admitted; every overdraft charge and refund
// landing exactly once).
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

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/algorithms/algotest"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// Factory returns a new store holding no bucket, that reads the time from
// c. Stores from separate calls must not share buckets.
type Factory func(t *testing.T, c *clock.Fake) store.Store

// T0 is where the suite's timelines start: algotest.Start,
// 2026-01-01T00:00:00Z in Unix nanoseconds.
const T0 = algotest.Start

// Domain is the domain of every charge the suite makes: a store that keeps
// a domain's buckets together (a Redis Cluster hash slot) settles each of
// the suite's requests in one place, as it would the engine's.
const Domain = "conformance"

// Options tune the suite to a store's speed.
type Options struct {
	// RandomRequests is how many requests each random timeline makes
	// (0: 2000).
	RandomRequests int
	// Goroutines is how many callers charge one bucket at once in
	// ConcurrentOneKey (0: 16).
	Goroutines int
	// ForwardOnly keeps the suite's clock from going back: for a store
	// that keeps each window of a fixed window under a key of its own (the
	// Redis store's Config.Counters, envoyproxy/ratelimit's layout), and so
	// decides a now that went back into an earlier window in that window,
	// where Limit.Decide settles it in the later one. Such a store runs on
	// a clock that never goes back (internal/core/clock). EdgeCases then decides
	// each case up to its first step back, and RandomTimelines' steps back
	// stay where they are.
	ForwardOnly bool
}

// Run runs the whole suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory, opts Options) {
	if opts.RandomRequests == 0 {
		opts.RandomRequests = 2000
	}
	if opts.Goroutines == 0 {
		opts.Goroutines = 16
	}
	t.Run("EdgeCases", func(t *testing.T) { edgeCases(t, newStore, opts.ForwardOnly) })
	t.Run("AllOrNothing", func(t *testing.T) { AllOrNothing(t, newStore) })
	t.Run("Quotas", func(t *testing.T) { Quotas(t, newStore) })
	t.Run("Keys", func(t *testing.T) { Keys(t, newStore) })
	t.Run("RandomTimelines", func(t *testing.T) {
		randomTimelines(t, newStore, opts.RandomRequests, opts.ForwardOnly)
	})
	t.Run("ConcurrentOneKey", func(t *testing.T) { ConcurrentOneKey(t, newStore, opts.Goroutines, algorithms.Algorithms()) })
	t.Run("ConcurrentUsage", func(t *testing.T) { ConcurrentUsage(t, newStore, opts.Goroutines, algorithms.Algorithms()) })
}

const (
	ns   = time.Nanosecond
	sec  = time.Second
	year = 365 * 24 * time.Hour

	maxReq  = algorithms.MaxRequests
	maxSpan = algorithms.MaxSpan
)

// EdgeCases decides algotest's cases, the specification of decisions that
// internal/core/algorithms' table tests decide with Limit.Decide, through the
// store: one bucket per case and algorithm, every decision exactly the
// case's, a step that changes the limit charging the bucket with the new
// one (as after a policy reload).
func EdgeCases(t *testing.T, newStore Factory) { edgeCases(t, newStore, false) }

// edgeCases is EdgeCases, each case only up to its first step back with
// forwardOnly (Options.ForwardOnly).
func edgeCases(t *testing.T, newStore Factory, forwardOnly bool) {
	for _, tc := range algotest.Cases() {
		for _, alg := range tc.Algorithms {
			t.Run(alg.String()+"/"+tc.Name, func(t *testing.T) {
				c := clock.NewFake(T0)
				s := newStore(t, c)
				limits, err := tc.Limits(alg)
				if err != nil {
					t.Fatal(err)
				}
				for i, st := range tc.Steps {
					if forwardOnly && st.Now() < c.Now() {
						break
					}
					c.Set(st.Now())
					got, at := ApplyAt(t, s, store.Charge{Domain: Domain, Key: []byte("edge"), Limit: &limits[i], Cost: st.Cost, Kind: st.Kind})
					if at != 0 && at != st.Now() {
						t.Fatalf("step %d (at %v): the store reports deciding at %d, its clock says %d", i, st.At, at, st.Now())
					}
					if got[0] != st.Want {
						t.Fatalf("step %d (at %v, %v of %d):\n got %+v\nwant %+v", i, st.At, st.Kind, st.Cost, got[0], st.Want)
					}
				}
			})
		}
	}
}

// AllOrNothing: a request's ordinary charges are charged on all their
// buckets or on none, and a denied request reports its admissible charges
// as peeks; its overdraft charges and refunds are applied whatever it
// decides, and its checks charge nothing (store.Settle's combining rule).
func AllOrNothing(t *testing.T, newStore Factory) {
	ten := MustLimit(t, algorithms.TokenBucket, 10, time.Minute, 0)
	two := MustLimit(t, algorithms.FixedWindow, 2, time.Minute, 0)
	three := MustLimit(t, algorithms.SlidingWindow, 3, time.Minute, 0)
	charge := func(key string, l *algorithms.Limit, cost int64) store.Charge {
		return store.Charge{Domain: Domain, Key: []byte(key), Limit: l, Cost: cost}
	}
	shadow := func(c store.Charge) store.Charge { c.Shadow = true; return c }
	probe := func(c store.Charge) store.Charge { c.Shadow, c.Probe = true, true; return c }
	kind := func(k algorithms.Kind, c store.Charge) store.Charge { c.Kind = k; return c }
	check := func(key string, l *algorithms.Limit) store.Charge { return kind(algorithms.Check, charge(key, l, 0)) }
	overdraft := func(key string, l *algorithms.Limit, cost int64) store.Charge {
		return kind(algorithms.Overdraft, charge(key, l, cost))
	}
	refund := func(key string, l *algorithms.Limit, units int64) store.Charge {
		return kind(algorithms.Refund, charge(key, l, units))
	}
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
	}, {
		name:      "a check charges nothing",
		charges:   []store.Charge{check("wide", ten), charge("narrow", two, 1)},
		wantCodes: []algorithms.Code{C, C},
		wantRem:   []int64{10, 1},
		after:     []int64{10, 1, 3},
	}, {
		name:      "a check of a bucket in debt denies the request",
		before:    []store.Charge{overdraft("wide", ten, 12)},
		charges:   []store.Charge{check("wide", ten), charge("narrow", two, 1)},
		wantCodes: []algorithms.Code{D, C},
		wantRem:   []int64{0, 2},
		after:     []int64{0, 2, 3},
	}, {
		name:      "an overdraft into debt is charged, and denies the ordinary charges",
		charges:   []store.Charge{overdraft("wide", ten, 15), charge("narrow", two, 1), charge("third", three, 1)},
		wantCodes: []algorithms.Code{D, C, C},
		wantRem:   []int64{0, 2, 3},
		after:     []int64{0, 2, 3},
	}, {
		name:      "an overdraft is charged when an ordinary charge denies the request",
		before:    []store.Charge{charge("narrow", two, 2)},
		charges:   []store.Charge{overdraft("wide", ten, 4), charge("narrow", two, 1), charge("third", three, 1)},
		wantCodes: []algorithms.Code{C, D, C},
		wantRem:   []int64{6, 0, 3},
		after:     []int64{6, 0, 3},
	}, {
		name:      "a refund is given back when the request is denied",
		before:    []store.Charge{charge("wide", ten, 6), charge("narrow", two, 2)},
		charges:   []store.Charge{refund("wide", ten, 4), charge("narrow", two, 1)},
		wantCodes: []algorithms.Code{C, D},
		wantRem:   []int64{8, 0},
		after:     []int64{8, 0, 3},
	}, {
		name:      "a refund never goes past rest",
		before:    []store.Charge{charge("wide", ten, 6), charge("third", three, 2)},
		charges:   []store.Charge{refund("wide", ten, 100), refund("third", three, 1)},
		wantCodes: []algorithms.Code{C, C},
		wantRem:   []int64{10, 2},
		after:     []int64{10, 2, 2},
	}, {
		name:      "a probe decides on the bucket the request finds, and is not charged",
		charges:   []store.Charge{probe(charge("wide", ten, 3)), charge("wide", ten, 7), probe(charge("narrow", two, 1)), charge("narrow", two, 2)},
		wantCodes: []algorithms.Code{C, C, C, C},
		wantRem:   []int64{7, 3, 1, 0},
		after:     []int64{3, 0, 3},
	}, {
		name:      "a denied probe denies nothing; in a denied request an admissible probe is a peek",
		before:    []store.Charge{charge("narrow", two, 1)},
		charges:   []store.Charge{probe(charge("narrow", two, 1)), charge("narrow", two, 2), probe(charge("wide", ten, 11)), probe(overdraft("third", three, 5))},
		wantCodes: []algorithms.Code{C, D, O, D},
		wantRem:   []int64{1, 1, 10, 0},
		after:     []int64{10, 1, 3},
	}, {
		name:      "a shadow overdraft into debt is charged and denies nothing",
		charges:   []store.Charge{shadow(overdraft("wide", ten, 11)), charge("narrow", two, 1)},
		wantCodes: []algorithms.Code{D, C},
		wantRem:   []int64{0, 1},
		after:     []int64{0, 1, 3},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, clock.NewFake(T0))
			if tt.before != nil {
				Apply(t, s, tt.before...)
			}
			got := Apply(t, s, tt.charges...)
			for i := range got {
				if got[i].Code != tt.wantCodes[i] || got[i].Remaining != tt.wantRem[i] {
					t.Errorf("charge %d: got %v remaining %d, want %v remaining %d", i, got[i].Code, got[i].Remaining, tt.wantCodes[i], tt.wantRem[i])
				}
			}
			peek := Apply(t, s, charge("wide", ten, 0), charge("narrow", two, 0), charge("third", three, 0))
			for i, want := range tt.after {
				if peek[i].Remaining != want {
					t.Errorf("afterwards bucket %d has %d remaining, want %d", i, peek[i].Remaining, want)
				}
			}
		})
	}
}

// Quotas: a request's quotas (store.Charge.Quota) deny it only when every
// one of them is spent, a quota being spent when one of its charges is
// denied; an admitted request charges its quotas with room and not the
// spent ones; a denied one charges no admission (Settle's rule 5).
func Quotas(t *testing.T, newStore Factory) {
	two := MustLimit(t, algorithms.FixedWindow, 2, time.Minute, 0)
	five := MustLimit(t, algorithms.TokenBucket, 5, time.Minute, 0)
	charge := func(key string, l *algorithms.Limit, cost int64, quota uint32) store.Charge {
		return store.Charge{Domain: Domain, Key: []byte(key), Limit: l, Cost: cost, Quota: quota}
	}
	over := func(c store.Charge) store.Charge { c.Kind = algorithms.Overdraft; return c }
	check := func(c store.Charge) store.Charge { c.Kind = algorithms.Check; return c }
	shadow := func(c store.Charge) store.Charge { c.Shadow = true; return c }
	C, D, O := algorithms.Allowed, algorithms.Denied, algorithms.OverCapacity
	keys := []string{"tenant", "default", "other", "global"}
	tests := []struct {
		name      string
		before    []store.Charge // applied first, one request each
		charges   []store.Charge
		wantCodes []algorithms.Code
		after     []int64 // remaining of tenant, default, other, global (fixed windows of two) afterwards
	}{{
		name:      "every quota with room: all charged",
		charges:   []store.Charge{charge("tenant", two, 1, 1), charge("default", two, 1, 2), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{C, C, C},
		after:     []int64{1, 1, 2, 1},
	}, {
		name:      "one quota spent: admitted, the spent one not charged",
		before:    []store.Charge{charge("default", two, 2, 0)},
		charges:   []store.Charge{charge("tenant", two, 1, 1), charge("default", two, 1, 2), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{C, D, C},
		after:     []int64{1, 0, 2, 1},
	}, {
		name:      "every quota spent: denied, nothing charged",
		before:    []store.Charge{charge("default", two, 2, 0), charge("tenant", two, 2, 0)},
		charges:   []store.Charge{charge("tenant", two, 1, 1), charge("default", two, 1, 2), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{D, D, C},
		after:     []int64{0, 0, 2, 2},
	}, {
		name:      "an ordinary denial denies whatever the quotas say",
		before:    []store.Charge{charge("global", two, 2, 0)},
		charges:   []store.Charge{charge("tenant", two, 1, 1), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{C, D},
		after:     []int64{2, 2, 2, 0},
	}, {
		name:      "a quota of two buckets is spent when one of them is",
		before:    []store.Charge{charge("other", two, 2, 0), charge("default", two, 2, 0)},
		charges:   []store.Charge{charge("tenant", two, 1, 1), charge("other", two, 1, 1), charge("default", two, 1, 2)},
		wantCodes: []algorithms.Code{C, D, D},
		after:     []int64{2, 0, 0, 2},
	}, {
		name:      "a quota of two buckets with room in both admits beside a spent one",
		before:    []store.Charge{charge("default", two, 2, 0)},
		charges:   []store.Charge{charge("tenant", two, 1, 1), charge("other", two, 1, 1), charge("default", two, 1, 2)},
		wantCodes: []algorithms.Code{C, C, D},
		after:     []int64{1, 0, 1, 2},
	}, {
		name:      "a shadow quota neither denies nor has room for the others",
		before:    []store.Charge{charge("default", two, 2, 0)},
		charges:   []store.Charge{shadow(charge("tenant", two, 1, 1)), charge("default", two, 1, 2), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{C, D, C},
		after:     []int64{2, 0, 2, 2},
	}, {
		name:      "one quota alone decides as an ordinary charge",
		before:    []store.Charge{charge("tenant", two, 2, 0)},
		charges:   []store.Charge{charge("tenant", two, 1, 7), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{D, C},
		after:     []int64{0, 2, 2, 2},
	}, {
		name:      "a quota over capacity is spent; the other admits",
		charges:   []store.Charge{charge("tenant", two, 3, 1), charge("default", two, 1, 2)},
		wantCodes: []algorithms.Code{O, C},
		after:     []int64{2, 1, 2, 2},
	}, {
		name:      "checks: one quota with room admits",
		before:    []store.Charge{charge("default", two, 2, 0)},
		charges:   []store.Charge{check(charge("tenant", two, 0, 1)), check(charge("default", two, 0, 2)), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{C, D, C},
		after:     []int64{2, 0, 2, 1},
	}, {
		name:      "checks: every quota spent denies",
		before:    []store.Charge{charge("default", two, 2, 0), charge("tenant", two, 2, 0)},
		charges:   []store.Charge{check(charge("tenant", two, 0, 1)), check(charge("default", two, 0, 2)), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{D, D, C},
		after:     []int64{0, 0, 2, 2},
	}, {
		name: "overdraft quotas land in full; the request is denied when both are left in debt",
		charges: []store.Charge{over(charge("tenant", five, 6, 1)), over(charge("default", five, 7, 2)),
			charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{D, D, C},
		after:     []int64{0, 0, 2, 2},
	}, {
		name:      "an overdraft quota left in debt beside one that is not: admitted",
		charges:   []store.Charge{over(charge("tenant", five, 6, 1)), over(charge("default", five, 2, 2)), charge("global", two, 1, 0)},
		wantCodes: []algorithms.Code{D, C, C},
		after:     []int64{0, 3, 2, 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, clock.NewFake(T0))
			for _, c := range tt.before {
				Apply(t, s, c)
			}
			got := Apply(t, s, tt.charges...)
			for i := range got {
				if got[i].Code != tt.wantCodes[i] {
					t.Errorf("charge %d (%s): got %v, want %v", i, tt.charges[i].Key, got[i].Code, tt.wantCodes[i])
				}
			}
			for i, k := range keys {
				l := two
				if k == "tenant" || k == "default" {
					for _, c := range tt.charges {
						if string(c.Key) == k {
							l = c.Limit
						}
					}
				}
				peek := Apply(t, s, store.Charge{Domain: Domain, Key: []byte(k), Limit: l})
				if peek[0].Remaining != tt.after[i] {
					t.Errorf("afterwards %s has %d remaining, want %d", k, peek[0].Remaining, tt.after[i])
				}
			}
		})
	}
}

// Keys: buckets are told apart by every byte of their keys, braces and
// zero bytes included, and one key's charges never touch another's.
func Keys(t *testing.T, newStore Factory) {
	s := newStore(t, clock.NewFake(T0))
	l := MustLimit(t, algorithms.FixedWindow, 3, time.Hour, 0)
	keys := [][]byte{
		[]byte("a"), []byte("a\x00"), []byte("\x00a"), []byte("{a}"), []byte("{a}b"), []byte("}{"),
		[]byte("\x04shop\x04path"), []byte("\x04shop\x04patH"), []byte("\xff\xfe"), {},
	}
	for i, k := range keys {
		for range i % 4 {
			Apply(t, s, store.Charge{Domain: Domain, Key: k, Limit: l, Cost: 1})
		}
	}
	for i, k := range keys {
		d := Apply(t, s, store.Charge{Domain: Domain, Key: k, Limit: l})
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
	admitted := store.Settle(charges, states, now, d)
	for i := range charges {
		if charges[i].Applied(d[i], admitted) {
			r.states[string(charges[i].Key)] = states[i]
		}
	}
	return d
}

// RandomTimelines compares the store with store.Settle on random limits
// (every algorithm; rates from 1 per 146 years to 2^32 per nanosecond,
// 7 per 3s among them; now and then a bucket's limit changed as a reload
// changes it), random requests of one to four charges (every
// Kind: admits, checks, overdraft charges deep into debt and refunds;
// costs from 0 to past capacity and MaxInt64, some shadow; now and then a
// probe of one of its buckets) and random times: steps of a
// nanosecond to years, near the epoch and near MaxTime, and steps back.
// Half the charges are quotas' (store.Charge.Quota 1 or 2), so that
// requests hold quotas of one or two buckets beside ordinary charges.
func RandomTimelines(t *testing.T, newStore Factory, requests int) {
	randomTimelines(t, newStore, requests, false)
}

// randomTimelines is RandomTimelines, without its steps back with
// forwardOnly (Options.ForwardOnly), and with half its refunds given a
// charge time (store.Charge.ChargedAt): within the last
// three periods of the charge's limit, now or a little later (a clock
// that went back since).
func randomTimelines(t *testing.T, newStore Factory, requests int, forwardOnly bool) {
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
			// A stream of its own, so the timelines are the same with and
			// without charge times.
			atRng := rand.New(rand.NewPCG(seed, 0xc4a2))

			const nKeys = 8
			limits := make([]*algorithms.Limit, nKeys)
			for i := range limits {
				limits[i] = randomLimit(rng)
			}
			now, high := start, start
			for n := range requests {
				now = nextNow(rng, now, high, ref)
				if forwardOnly {
					now = max(now, high)
				}
				high = max(high, now)
				c.Set(now)
				if rng.IntN(64) == 0 {
					// A reload: a bucket keeps its state under a changed limit.
					k := rng.IntN(nKeys)
					limits[k] = changedLimit(rng, limits[k])
				}
				charges := randomRequest(rng, limits)
				for i := range charges {
					if c := &charges[i]; c.Kind == algorithms.Refund && atRng.IntN(2) == 0 {
						c.ChargedAt = max(now-atRng.Int64N(3*min(int64(c.Limit.Period()), 1<<60))+atRng.Int64N(2), 1)
					}
				}
				want := ref.apply(charges, now)
				got, at := ApplyAt(t, s, charges...)
				if at != 0 && at != now {
					t.Fatalf("request %d at %d: the store reports deciding at %d", n, now, at)
				}
				for i := range charges {
					want[i].At = 0
					if got[i] != want[i] {
						l := charges[i].Limit
						t.Fatalf("request %d at %d, charge %d (%v %d per %d, capacity %d; %v of %d, shadow %v):\n got %+v\nwant %+v",
							n, now, i, l.Algorithm(), l.Requests(), int64(l.Period()), l.Capacity(), charges[i].Kind, charges[i].Cost, charges[i].Shadow, got[i], want[i])
					}
				}
			}
		})
	}
}

func randomLimit(rng *rand.Rand) *algorithms.Limit {
	for {
		alg := algorithms.Algorithms()[rng.IntN(6)]
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
		switch alg {
		case algorithms.TokenBucket, algorithms.LeakyBucket, algorithms.LeakyBucketQueue:
			if rng.IntN(2) == 0 {
				burst = 1 + rng.Int64N(min(requests*4, maxReq))
			}
		case algorithms.Concurrency:
			requests = 1 + (requests-1)%algorithms.MaxInFlight
			period = 1 + (period-1)%algorithms.MaxLease
		}
		if l, err := algorithms.NewLimit(alg, requests, period, burst); err == nil {
			return &l
		}
	}
}

// changedLimit returns a limit that a policy reload may put over the
// buckets of l: the same period and kind of state (a window of the same
// algorithm, a concurrency; any of the buckets), any rate and capacity.
func changedLimit(rng *rand.Rand, l *algorithms.Limit) *algorithms.Limit {
	for {
		alg := l.Algorithm()
		requests := 1 + rng.Int64N(min(2*l.Requests()+2, maxReq))
		var burst int64
		switch alg {
		case algorithms.Concurrency:
			requests = 1 + (requests-1)%algorithms.MaxInFlight
		case algorithms.TokenBucket, algorithms.LeakyBucket, algorithms.LeakyBucketQueue:
			alg = algorithms.Algorithms()[2+rng.IntN(3)]
			if rng.IntN(2) == 0 {
				burst = 1 + rng.Int64N(min(requests*4, maxReq))
			}
		}
		if c, err := algorithms.NewLimit(alg, requests, l.Period(), burst); err == nil {
			return &c
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
		kind := algorithms.Admit
		switch rng.IntN(10) {
		case 0, 1:
			kind = algorithms.Check
		case 2, 3, 4:
			kind = algorithms.Overdraft
			if rng.IntN(3) == 0 {
				// Deep into debt: up to the bound.
				cost = capacity + rng.Int64N(math.MaxInt64-capacity)>>rng.IntN(63)
			}
		case 5, 6:
			kind = algorithms.Refund
		}
		charges[i] = store.Charge{Domain: Domain, Key: fmt.Appendf(nil, "key-%d", k), Limit: l, Cost: cost, Kind: kind, Shadow: rng.IntN(8) == 0}
		if rng.IntN(2) == 0 {
			charges[i].Quota = 1 + uint32(rng.IntN(2)) // quotas of one or two buckets
		}
	}
	if rng.IntN(4) == 0 {
		// A probe of one of the request's buckets, as the engine makes for
		// descriptors that name one bucket.
		p := charges[rng.IntN(n)]
		p.Cost = rng.Int64N(max(p.Cost, 1)) + 1
		p.Shadow, p.Probe = true, true
		charges = append(charges, p)
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
	return algorithms.ClampTime(next)
}

// ConcurrentOneKey: for each of algs, goroutines charge one bucket at once, half of them
// with a second bucket of their own; exactly the bound is admitted.
func ConcurrentOneKey(t *testing.T, newStore Factory, goroutines int, algs []algorithms.Algorithm) {
	for _, alg := range algs {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, clock.NewFake(T0))
			l := MustLimit(t, alg, 100, time.Hour, 0)
			own := MustLimit(t, algorithms.FixedWindow, 1_000_000, time.Hour, 0)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
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
				t.Fatalf("admitted %d of %d, want exactly 100", got, 12*goroutines)
			}
		})
	}
}

// ConcurrentUsage: for each of algs, goroutines charge one bucket with overdraft charges,
// refunds and checks at once, at one instant; every overdraft and refund
// lands exactly once, so the bucket ends with exactly their sum used (past
// its capacity: in debt, as the last check says).
func ConcurrentUsage(t *testing.T, newStore Factory, goroutines int, algs []algorithms.Algorithm) {
	const rounds, charged, refunded = 12, 9, 4
	for _, alg := range algs {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, clock.NewFake(T0))
			l := MustLimit(t, alg, 1000, time.Hour, 0)
			key := []byte("shared")
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						// Each refund follows its own overdraft: the bucket is
						// never refunded past rest.
						for _, c := range []store.Charge{
							{Domain: Domain, Key: key, Limit: l, Kind: algorithms.Overdraft, Cost: charged},
							{Domain: Domain, Key: key, Limit: l, Kind: algorithms.Check},
							{Domain: Domain, Key: key, Limit: l, Kind: algorithms.Refund, Cost: refunded},
						} {
							if err := s.Apply(context.Background(), []store.Charge{c}, make([]algorithms.Decision, 1)); err != nil {
								t.Error(err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			used := int64(goroutines * rounds * (charged - refunded))
			d := Apply(t, s, store.Charge{Domain: Domain, Key: key, Limit: l, Kind: algorithms.Check})[0]
			if want := max(l.Capacity()-used, 0); d.Remaining != want || (d.Code == algorithms.Denied) != (used >= l.Capacity()) {
				t.Fatalf("after %d used: %+v, want %d remaining, denied iff %d ≥ %d", used, d, want, used, l.Capacity())
			}
			// Refunding what is used brings the bucket back to rest exactly.
			if d := Apply(t, s, store.Charge{Domain: Domain, Key: key, Limit: l, Kind: algorithms.Refund, Cost: used - 1})[0]; d.Remaining != l.Capacity()-1 {
				t.Fatalf("a refund of %d of the %d used: %+v, want %d remaining", used-1, used, d, l.Capacity()-1)
			}
		})
	}
}

// MustLimit returns the limit algorithms.NewLimit makes, failing t if it
// makes none.
func MustLimit(t testing.TB, alg algorithms.Algorithm, requests int64, period time.Duration, burst int64) *algorithms.Limit {
	t.Helper()
	l, err := algorithms.NewLimit(alg, requests, period, burst)
	if err != nil {
		t.Fatal(err)
	}
	return &l
}

// Apply applies charges as one request and returns their decisions as
// algorithms.Limit's methods report them (At 0), failing t if the store
// fails or reports the decisions at different instants (ApplyAt). Every
// charge must name its domain, as the engine's do.
func Apply(t testing.TB, s store.Store, charges ...store.Charge) []algorithms.Decision {
	t.Helper()
	d, _ := ApplyAt(t, s, charges...)
	return d
}

// ApplyAt is Apply, returning too the instant the store reports it
// decided at (algorithms.Decision.At; 0 when it does not tell). It fails t
// when the decisions report different instants: a store settles a
// request at one instant.
func ApplyAt(t testing.TB, s store.Store, charges ...store.Charge) ([]algorithms.Decision, int64) {
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
	var at int64
	for i := range d {
		if i == 0 {
			at = d[i].At
		} else if d[i].At != at {
			t.Fatalf("decision %d is at %d, decision 0 at %d: one request is decided at one instant", i, d[i].At, at)
		}
		d[i].At = 0
	}
	return d, at
}
