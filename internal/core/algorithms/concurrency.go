package algorithms

import (
	"math"
	"time"
)

// This file holds Concurrency: a count of units in flight, charged on a
// request and given back by a refund, each unit expiring by itself a lease
// after it was charged (see "Concurrency" in the package doc).
//
// Notation: L = the limit (Requests, at most MaxInFlight), T = the lease
// (Period). Units are counted in generations: time is cut into slots of
// G = ceil(T/(Generations-1)) nanoseconds aligned to multiples of G from 0,
// and the units charged in slot j form generation j. Every unit of
// generation j expires at E(j) = (j+1)·G - 1 + T: a unit charged at c in
// [j·G, (j+1)·G) expires G-1-(c-j·G) nanoseconds after c + T, never sooner
// and at most G-1 later. At now, in slot c, generation c-Generations has
// always expired: T ≤ (Generations-1)·G, so E(c-Generations) ≤ c·G - 1 <
// now. So a state keeps the counts of Generations generations.
//
// The State: restAt = E(j), j the newest generation holding a unit (0 for
// the zero State, which holds none); the counts of generations j, j-1, …,
// j-Generations+1 as 16-bit fields, newest first: three in t (from its low
// bits) with t's sign bit set, two in n, two in m. The slots of the
// generations after j are read from restAt: [restAt-T+1+(k-1)·G,
// restAt-T+1+k·G) is generation j+k's (aligned to multiples of G unless
// Later moved restAt, which moves the slots with it). The sign of t tells
// a Concurrency state from the others' (whose t is a time, never
// negative): Later moves only its restAt.

// Generations is the number of generations a Concurrency state counts: a
// unit never released expires at most ceil(lease/(Generations-1)) - 1
// nanoseconds after its lease, less than a sixth of the lease.
const Generations = 7

// MaxInFlight is the largest max_in_flight of a Concurrency limit: a
// generation's count is 16 bits.
const MaxInFlight = math.MaxUint16

// countsFlag is t's sign bit, set in every Concurrency State but the zero
// State.
const countsFlag = uint64(1) << 63

// gens is a Concurrency state's counts, newest generation first.
type gens [Generations]int32

// unpackGens returns s's counts, newest first.
func unpackGens(s State) gens {
	t := uint64(s.t)
	return gens{
		int32(t & 0xffff), int32(t >> 16 & 0xffff), int32(t >> 32 & 0xffff),
		int32(s.n & 0xffff), int32(s.n >> 16), int32(s.m & 0xffff), int32(s.m >> 16),
	}
}

// setLane sets s's count of generation i (0 the newest) to c, in its
// packed field.
func setLane(s *State, i int, c int64) {
	switch i {
	case 0, 1, 2:
		sh := 16 * i
		s.t = int64(uint64(s.t)&^(0xffff<<sh) | uint64(c)<<sh)
	case 3, 4:
		sh := 16 * (i - 3)
		s.n = s.n&^(0xffff<<sh) | uint32(c)<<sh
	default:
		sh := 16 * (i - 5)
		s.m = s.m&^(0xffff<<sh) | uint32(c)<<sh
	}
}

// inFlight returns the sum of s's counts, from their packed fields.
func inFlight(s State) int64 {
	t := uint64(s.t)
	return int64(t&0xffff + t>>16&0xffff + t>>32&0xffff + uint64(s.n&0xffff+s.n>>16+s.m&0xffff+s.m>>16))
}

// lane returns s's count of generation i (0 the newest), from its packed
// field.
func lane(s State, i int) int64 {
	return laneOf(uint64(s.t)&(1<<48-1), uint64(s.n)|uint64(s.m)<<32, i)
}

// laneOf returns the count of generation i of the counts packed as lo
// (generations 0 to 2, t without its sign) and hi (3 to 6, n then m).
func laneOf(lo, hi uint64, i int) int64 {
	if i < 3 {
		return int64(lo >> (16 * i) & 0xffff)
	}
	return int64(hi >> (16 * (i - 3)) & 0xffff)
}

// leaseAt sets g, zero, to the counts of s as they stand at now — shifted
// so that g[0] is now's generation, and those expired at now cleared — and
// returns end, E of now's generation (of s's newest, for a clock that went
// back before it). Generation g[i] expires at end - i·G.
func (l *Limit) leaseAt(g *gens, s State, now int64) (end int64) {
	if s.restAt <= now {
		// Every generation expired (or the zero State): now's generation
		// is the slot of G holding now.
		return l.expiry(now / l.gen)
	}
	*g = unpackGens(s)
	// s's newest generation is the slot [restAt-T+1-G, restAt-T+1); as
	// restAt > now and T ≤ (Generations-1)·G, now lies at most
	// Generations-2 slots after it.
	end = s.restAt
	next := end - l.period + 1 // the end of the newest generation's slot
	shift := 0
	for now >= next {
		if shift++; shift == Generations {
			// Only for a State of another Limit: nothing of it is live.
			*g = gens{}
			return l.expiry(now / l.gen)
		}
		end += l.gen
		next += l.gen
	}
	if shift > 0 {
		copy(g[shift:], g[:Generations-shift])
		clear(g[:shift])
	}
	// Clear the expired, oldest first.
	e := end - (Generations-1)*l.gen
	for i := Generations - 1; i > 0 && e <= now; i-- {
		g[i] = 0
		e += l.gen
	}
	return end
}

// expiry returns E(j) = (j+1)·G - 1 + T, when generation j's units expire.
func (l *Limit) expiry(j int64) int64 { return (j+1)*l.gen - 1 + l.period }

// leaseState returns the state holding counts g, g[0] expiring at end.
func (l *Limit) leaseState(g *gens, end int64) State {
	i := 0
	for i < Generations && g[i] == 0 {
		i++
	}
	if i == Generations {
		return State{}
	}
	// The newest non-empty generation, g[i], goes first.
	var h gens
	copy(h[:], g[i:])
	return State{
		restAt: end - int64(i)*l.gen,
		t:      int64(countsFlag | uint64(h[0]) | uint64(h[1])<<16 | uint64(h[2])<<32),
		n:      uint32(h[3]) | uint32(h[4])<<16,
		m:      uint32(h[5]) | uint32(h[6])<<16,
	}
}

// inFlight returns the sum of g: the units in flight.
func (g *gens) inFlight() int64 {
	var sum int64
	for _, c := range g {
		sum += int64(c)
	}
	return sum
}

// leaseReport is the decision reporting counts g (g[0] expiring at end,
// in flight in all) at now: Remaining, ResetAfter and, when a cost of
// extra more does not fit (extra 0: in debt; 1: a check), Denied with the
// RetryAfter of a cost of max(extra, 1).
func (l *Limit) leaseReport(g *gens, in, end, now, extra int64) Decision {
	d := Decision{Remaining: max(l.capacity-in, 0), Debt: max(in-l.capacity, 0)}
	if in > 0 {
		i := 0
		for g[i] == 0 {
			i++
		}
		d.ResetAfter = time.Duration(end - int64(i)*l.gen - now)
	}
	if in+extra > l.capacity {
		d.Code = Denied
		d.RetryAfter = l.leaseRetry(g, end, now, in+max(extra, 1)-l.capacity)
	}
	return d
}

// leaseRetry returns how long until excess units of g have expired if
// none is released: until the expiry of the generation, oldest first, by
// which the counts add up to excess (excess ≤ the sum of g).
func (l *Limit) leaseRetry(g *gens, end, now, excess int64) time.Duration {
	for i := Generations - 1; i > 0; i-- {
		if excess -= int64(g[i]); excess <= 0 {
			return time.Duration(end - int64(i)*l.gen - now)
		}
	}
	return time.Duration(end - now)
}

// concurrency decides Concurrency: a cost is admitted iff the units in
// flight at now plus cost are at most L; it joins now's generation.
//
// A now in a generation before s's newest (a clock that went back) is
// settled in s's newest generation, with every count s holds: no unit
// expires sooner and the count is no lower than it was.
func (l *Limit) concurrency(s State, now, cost int64) (State, Decision) {
	if cost > 0 && cost <= l.capacity && now < s.restAt {
		// Most charges, on s's packed counts: generations i+1 and older
		// have expired at now (e is generation i's expiry).
		i, e := Generations-1, s.restAt-(Generations-1)*l.gen
		for e <= now {
			i, e = i-1, e+l.gen
		}
		in, lo, hi := inFlight(s), uint64(s.t)&(1<<48-1), uint64(s.n)|uint64(s.m)<<32
		for j := Generations - 1; j > i; j-- {
			in -= laneOf(lo, hi, j)
		}
		reset := time.Duration(s.restAt - now)
		if in+cost > l.capacity {
			d := Decision{Code: Denied, Remaining: max(l.capacity-in, 0), Debt: max(in-l.capacity, 0), ResetAfter: reset, RetryAfter: reset}
			// Oldest first, until in+cost-L units have expired.
			for excess := in + cost - l.capacity; i > 0; i, e = i-1, e+l.gen {
				if excess -= laneOf(lo, hi, i); excess <= 0 {
					d.RetryAfter = time.Duration(e - now)
					break
				}
			}
			return s, d
		}
		if i == Generations-1 && now < s.restAt-l.period+1 {
			// Nothing expired and now's generation is s's newest: in+cost ≤
			// L fits its 16 bits.
			s.t += cost
			return s, Decision{Remaining: l.capacity - in - cost, ResetAfter: reset}
		}
	}
	var g gens
	end := l.leaseAt(&g, s, now)
	in := g.inFlight()
	switch {
	case cost <= 0 || cost > l.capacity:
		d := l.leaseReport(&g, in, end, now, 0)
		d.Code, d.RetryAfter = Allowed, 0
		if cost > 0 {
			d.Code = OverCapacity
		}
		return s, d
	case in+cost > l.capacity:
		return s, l.leaseReport(&g, in, end, now, cost)
	}
	g[0] += int32(cost)
	return l.leaseState(&g, end), l.leaseReport(&g, in+cost, end, now, 0)
}

// concurrencyCheck is Check for Concurrency.
func (l *Limit) concurrencyCheck(s State, now int64) Decision {
	var g gens
	end := l.leaseAt(&g, s, now)
	return l.leaseReport(&g, g.inFlight(), end, now, 1)
}

// concurrencyOverdraft charges cost in full into now's generation, whose
// count stops at MaxInFlight.
func (l *Limit) concurrencyOverdraft(s State, now, cost int64) (State, Decision) {
	var g gens
	end := l.leaseAt(&g, s, now)
	if cost > 0 {
		g[0] = int32(min(int64(g[0])+min(cost, MaxInFlight), MaxInFlight))
		s = l.leaseState(&g, end)
	}
	return s, l.leaseReport(&g, g.inFlight(), end, now, 0)
}

// concurrencyRefund releases units, taking them from the oldest live
// generation first (see "Concurrency" in the package doc for why), never
// below zero.
func (l *Limit) concurrencyRefund(s State, now, units int64) (State, Decision) {
	if units > 0 && now < s.restAt-(Generations-1)*l.gen {
		// None of s's generations has expired at now: on its packed counts.
		in := inFlight(s)
		if units >= in {
			return State{}, Decision{Remaining: l.capacity}
		}
		// Oldest first; the newest generation keeps at least one unit, so
		// restAt holds.
		for i, back := Generations-1, units; back > 0; i-- {
			if c := lane(s, i); c > 0 {
				b := min(back, c)
				setLane(&s, i, c-b)
				back -= b
			}
		}
		return s, Decision{Remaining: max(l.capacity-in+units, 0), Debt: max(in-units-l.capacity, 0), ResetAfter: time.Duration(s.restAt - now)}
	}
	var g gens
	end := l.leaseAt(&g, s, now)
	in := g.inFlight()
	if units > 0 && in > 0 {
		back := min(units, in)
		in -= back
		for i := Generations - 1; back > 0; i-- {
			b := min(back, int64(g[i]))
			g[i] -= int32(b)
			back -= b
		}
		s = l.leaseState(&g, end)
	}
	d := l.leaseReport(&g, in, end, now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return s, d
}

// concurrencyRefundAt releases units from the generation that a charge at
// chargedAt (≤ now) joined, never below zero there; nothing when that
// generation has expired at now. After a clock that went back (now before
// s's newest generation) it releases as concurrencyRefund.
func (l *Limit) concurrencyRefundAt(s State, now, units, chargedAt int64) (State, Decision) {
	var g gens
	end := l.leaseAt(&g, s, now)
	// g[i]'s slot is [next-(i+1)·G, next-i·G).
	next := end - l.period + 1
	if now < next-l.gen {
		return l.concurrencyRefund(s, now, units)
	}
	if i := (next - 1 - chargedAt) / l.gen; units > 0 && i < Generations && g[i] > 0 {
		g[i] = int32(max(int64(g[i])-units, 0))
		s = l.leaseState(&g, end)
	}
	d := l.leaseReport(&g, g.inFlight(), end, now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return s, d
}
