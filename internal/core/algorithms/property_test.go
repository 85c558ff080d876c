package algorithms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

type limitSpec struct {
	requests int64
	period   time.Duration
	burst    int64
}

// specs returns limits from tiny rates to huge ones, with whole and
// fractional intervals, for alg.
func specs(alg Algorithm) []limitSpec {
	all := []limitSpec{
		{7, 3 * sec, 4},             // interval 428,571,428 4/7 ns
		{3, 10 * ns, 5},             // interval 3⅓ns: fractions dominate
		{100, 100 * ns, 100},        // interval 1ns
		{1, day, 1},                 // 1 per day
		{5, sec, 1},                 // burst 1
		{1e9, sec, 1e9},             // 1e9 per second
		{MaxRequests, time.Hour, 3}, // the most requests, interval ~838ns
	}
	if !alg.usesBurst() {
		for i := range all {
			all[i].burst = 0
		}
	}
	if alg == Concurrency {
		for i := range all {
			all[i].requests = min(all[i].requests, MaxInFlight)
		}
	}
	return all
}

// arrivals draws a random timeline for a limit: often several requests at
// one instant, gaps around the emission interval and the period, and now
// and then a gap of months.
type arrivals struct {
	rng *rand.Rand
	l   Limit
}

func (a arrivals) gap() int64 {
	p := a.l.period
	interval := max(p/a.l.requests, 1)
	switch x := a.rng.IntN(100); {
	case x < 25:
		return 0
	case x < 30:
		return 1
	case x < 60:
		return a.rng.Int64N(2*interval + 1)
	case x < 85:
		return a.rng.Int64N(p + 1)
	case x < 98:
		return a.rng.Int64N(3*p + 1)
	default:
		return a.rng.Int64N(int64(year) / 2)
	}
}

func (a arrivals) cost() int64 {
	c := a.l.capacity
	switch x := a.rng.IntN(100); {
	case x < 10:
		return 0
	case x < 60:
		return 1
	case x < 75:
		return 1 + a.rng.Int64N(min(c, 3))
	case x < 88:
		return 1 + a.rng.Int64N(c)
	case x < 94:
		return c
	default:
		return c + 1 + a.rng.Int64N(2)
	}
}

// On random timelines whose clock never goes back, every decision keeps
// the contract (checkedDecide: RetryAfter is exact, Remaining and
// ResetAfter mean what they say, ...), agrees with a slow model in the
// issue's own terms, and what is admitted stays within the algorithm's
// bound over every interval.
func TestRandomArrivals(t *testing.T) {
	const steps = 2000
	for _, alg := range Algorithms() {
		for i, spec := range specs(alg) {
			t.Run(fmt.Sprintf("%v/%d per %v burst %d", alg, spec.requests, spec.period, spec.burst), func(t *testing.T) {
				l := mustLimit(t, alg, spec.requests, spec.period, spec.burst)
				gen := arrivals{newRand(uint64(alg)<<8 | uint64(i)), l}
				m := newModel(l)
				var (
					s      State
					now    = t0 + gen.rng.Int64N(int64(day))
					adm    []admission
					counts [3]int
				)
				for n := range steps {
					now += gen.gap()
					cost := gen.cost()
					next, d, err := checkedDecide(l, s, now, cost)
					if err != nil {
						t.Fatalf("decision %d (now %d, cost %d): %v", n, now, cost, err)
					}
					want := m.decide(now, cost)
					if alg == FixedWindow || alg == SlidingWindow {
						want.ResetAfter, want.RetryAfter = d.ResetAfter, d.RetryAfter
					}
					if d != want {
						t.Fatalf("decision %d (now %d, cost %d):\n got %+v\nmodel %+v", n, now, cost, d, want)
					}
					if d.Code == Allowed && cost > 0 {
						adm = append(adm, admission{now, cost})
					}
					counts[d.Code]++
					s = next
				}
				if msg := checkBound(l, adm); msg != "" {
					t.Error(msg)
				}
				if counts[Allowed] == 0 || counts[Denied] == 0 || counts[OverCapacity] == 0 {
					t.Errorf("timeline too tame: %v allowed, denied, over capacity", counts)
				}
			})
		}
	}
}

// On random timelines whose clock steps back now and then, every decision
// still keeps the contract, and no decision is more generous than the same
// state would give at any later time: going back never grants extra.
func TestClockGoingBack(t *testing.T) {
	const steps = 2000
	for _, alg := range Algorithms() {
		for i, spec := range specs(alg) {
			t.Run(fmt.Sprintf("%v/%d per %v burst %d", alg, spec.requests, spec.period, spec.burst), func(t *testing.T) {
				l := mustLimit(t, alg, spec.requests, spec.period, spec.burst)
				gen := arrivals{newRand(uint64(alg)<<8 | uint64(i) | 1<<16), l}
				var (
					s       State
					now     = t0
					latest  = now
					stepped int
				)
				for n := range steps {
					if gen.rng.IntN(8) == 0 {
						now -= gen.rng.Int64N(2*l.period + 1)
						stepped++
					} else {
						now += gen.gap()
					}
					latest = max(latest, now)
					cost := gen.cost()
					next, d, err := checkedDecide(l, s, now, cost)
					if err != nil {
						t.Fatalf("decision %d (now %d, cost %d): %v", n, now, cost, err)
					}
					_, peek := l.Decide(s, now, 0)
					for _, later := range []int64{latest, now + gen.rng.Int64N(2*l.period+1)} {
						_, dl := l.Decide(s, later, cost)
						_, pl := l.Decide(s, later, 0)
						if d.Code == Allowed && dl.Code != Allowed || peek.Remaining > pl.Remaining {
							t.Fatalf("decision %d: at %d (cost %d) %+v, remaining %d; later at %d %+v, remaining %d",
								n, now, cost, d, peek.Remaining, later, dl, pl.Remaining)
						}
					}
					s = next
				}
				if stepped == 0 {
					t.Fatal("the clock never went back")
				}
			})
		}
	}
}

// A State of another Limit (after a rule changed) gives unspecified
// answers, but never a panic or a Remaining outside [0, Capacity].
func TestForeignState(t *testing.T) {
	rng := newRand(42)
	field := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64()
		case 1:
			return -rng.Int64()
		case 2:
			return t0 + rng.Int64N(int64(2*day)) - int64(day)
		}
		return rng.Int64N(1000)
	}
	for _, alg := range Algorithms() {
		for _, spec := range specs(alg) {
			l := mustLimit(t, alg, spec.requests, spec.period, spec.burst)
			for range 2000 {
				s := State{restAt: field(), t: field(), n: rng.Uint32(), m: rng.Uint32()}
				now := t0 + rng.Int64N(int64(2*day)) - int64(day)
				cost := arrivals{rng, l}.cost()
				_, d := l.Decide(s, now, cost)
				if d.Remaining < 0 || d.Remaining > l.Capacity() {
					t.Fatalf("%v: Decide(%+v, %d, %d) = %+v: Remaining outside [0, %d]", alg, s, now, cost, d, l.Capacity())
				}
			}
		}
	}
}
