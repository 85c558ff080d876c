package algorithms

import (
	"math/big"
	"time"
)

// The models below decide as the package documents, written the slow and
// obvious way with math/big and in the terms the issue uses (tokens, a
// level, counts per window) rather than as GCRA or packed state. They
// assume a clock that never goes back. The property tests check the
// package against them decision by decision.

type model interface {
	decide(now, cost int64) Decision
}

func newModel(l Limit) model {
	switch l.Algorithm() {
	case TokenBucket, LeakyBucketQueue:
		return &tokenModel{l: l, tokens: big.NewRat(l.capacity, 1)}
	case LeakyBucket:
		return &levelModel{l: l, level: new(big.Rat)}
	case FixedWindow:
		return &windowModel{l: l, counts: map[int64]int64{}}
	default:
		return &windowModel{l: l, counts: map[int64]int64{}, sliding: true}
	}
}

// ratFloor and ratCeil round r to an integer.
func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return q.Int64()
}

func ratCeil(r *big.Rat) int64 { return -ratFloor(new(big.Rat).Neg(r)) }

// time returns x·P/R rounded up: the time x tokens take to refill.
func (m *tokenModel) time(x *big.Rat) time.Duration {
	t := new(big.Rat).Mul(x, big.NewRat(m.l.period, m.l.requests))
	return time.Duration(ratCeil(t))
}

// tokenModel is a token bucket: tokens refill continuously at R per P up
// to the capacity; a charge takes cost tokens if there are that many.
// LeakyBucketQueue is the same with a delay until the bucket would hold
// its capacity again before the charge.
type tokenModel struct {
	l      Limit
	tokens *big.Rat
	last   int64
	seen   bool
}

func (m *tokenModel) decide(now, cost int64) Decision {
	if m.seen && now > m.last {
		refill := big.NewRat(now-m.last, 1)
		refill.Mul(refill, big.NewRat(m.l.requests, m.l.period))
		m.tokens.Add(m.tokens, refill)
		if full := big.NewRat(m.l.capacity, 1); m.tokens.Cmp(full) > 0 {
			m.tokens = full
		}
	}
	m.seen, m.last = true, max(now, m.last)
	missing := func() *big.Rat { return new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), m.tokens) }

	d := Decision{Remaining: ratFloor(m.tokens), ResetAfter: m.time(missing())}
	switch {
	case cost > m.l.capacity:
		d.Code = OverCapacity
	case cost <= 0:
	case m.tokens.Cmp(big.NewRat(cost, 1)) >= 0:
		if m.l.Algorithm() == LeakyBucketQueue {
			d.Delay = m.time(missing())
		}
		m.tokens.Sub(m.tokens, big.NewRat(cost, 1))
		d.Remaining, d.ResetAfter = ratFloor(m.tokens), m.time(missing())
	default:
		d.Code = Denied
		d.RetryAfter = m.time(new(big.Rat).Sub(big.NewRat(cost, 1), m.tokens))
	}
	return d
}

// levelModel is a leaky bucket meter: a level that drains continuously at
// R per P; a charge is admitted iff level + cost fits the capacity.
type levelModel struct {
	l     Limit
	level *big.Rat
	last  int64
	seen  bool
}

func (m *levelModel) decide(now, cost int64) Decision {
	if m.seen && now > m.last {
		drain := big.NewRat(now-m.last, 1)
		drain.Mul(drain, big.NewRat(m.l.requests, m.l.period))
		m.level.Sub(m.level, drain)
		if m.level.Sign() < 0 {
			m.level.SetInt64(0)
		}
	}
	m.seen, m.last = true, max(now, m.last)
	perRequest := big.NewRat(m.l.period, m.l.requests)
	drainTime := func(x *big.Rat) time.Duration {
		return time.Duration(ratCeil(new(big.Rat).Mul(x, perRequest)))
	}
	room := func() *big.Rat { return new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), m.level) }

	d := Decision{Remaining: ratFloor(room()), ResetAfter: drainTime(m.level)}
	switch {
	case cost > m.l.capacity:
		d.Code = OverCapacity
	case cost <= 0:
	case new(big.Rat).Add(m.level, big.NewRat(cost, 1)).Cmp(big.NewRat(m.l.capacity, 1)) <= 0:
		m.level.Add(m.level, big.NewRat(cost, 1))
		d.Remaining, d.ResetAfter = ratFloor(room()), drainTime(m.level)
	default:
		d.Code = Denied
		over := new(big.Rat).Add(m.level, big.NewRat(cost, 1))
		over.Sub(over, big.NewRat(m.l.capacity, 1))
		d.RetryAfter = drainTime(over)
	}
	return d
}

// windowModel counts admitted hits per window index now/P. A fixed window
// admits while its own count fits; a sliding one while the previous count,
// weighted by (P-e)/P, plus its own fits.
type windowModel struct {
	l       Limit
	counts  map[int64]int64
	sliding bool
}

// decide reports only Code and Remaining: the tests check RetryAfter and
// ResetAfter by waiting them out instead.
func (m *windowModel) decide(now, cost int64) Decision {
	p, limit := m.l.period, m.l.capacity
	k, e := now/p, now%p
	// used(c)·P: the estimate, times P, with a further charge of c.
	used := func(c int64) *big.Int {
		u := big.NewInt(m.counts[k] + c)
		u.Mul(u, big.NewInt(p))
		if m.sliding {
			prev := big.NewInt(m.counts[k-1])
			u.Add(u, prev.Mul(prev, big.NewInt(p-e)))
		}
		return u
	}
	remaining := func() int64 {
		free := new(big.Int).Mul(big.NewInt(limit), big.NewInt(p))
		free.Sub(free, used(0))
		if free.Sign() < 0 {
			return 0
		}
		return free.Div(free, big.NewInt(p)).Int64()
	}
	var d Decision
	switch {
	case cost > limit:
		d.Code = OverCapacity
	case cost <= 0:
	case used(cost).Cmp(new(big.Int).Mul(big.NewInt(limit), big.NewInt(p))) <= 0:
		m.counts[k] += cost
	default:
		d.Code = Denied
	}
	d.Remaining = remaining()
	return d
}
