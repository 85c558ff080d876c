package algorithms

import (
	"math"
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
	// check, overdraft and refund are Limit.Check, Overdraft and Refund.
	check(now int64) Decision
	overdraft(now, cost int64) Decision
	refund(now, units int64) Decision
	// changeTo puts the bucket under the limit l, of the same period (a
	// reload): it keeps what was used — a window's counts, a bucket's
	// level — and a bucket goes on draining at its old rate until a
	// decision writes it (an admission, an overdraft charge, a refund).
	changeTo(l Limit)
}

// apply is o (decide for Admit) on m at now.
func apply(m model, o Kind, now, cost int64) Decision {
	switch o {
	case Check:
		return m.check(now)
	case Overdraft:
		return m.overdraft(now, cost)
	case Refund:
		return m.refund(now, cost)
	}
	return m.decide(now, cost)
}

// The bounds on debt, as the package doc states them: a bucket's backlog
// (the time it takes to be back at rest) is at most MaxSpan, that is, at
// most MaxSpan·R/P requests are missing; a window's count is at most
// MaxCount.
func maxMissing(l Limit) *big.Rat {
	return new(big.Rat).Mul(big.NewRat(int64(MaxSpan), 1), big.NewRat(l.requests, l.period))
}

func newModel(l Limit) model {
	switch l.Algorithm() {
	case TokenBucket, LeakyBucketQueue:
		return &tokenModel{l: l, rate: l.requests, tokens: big.NewRat(l.capacity, 1)}
	case LeakyBucket:
		return &levelModel{l: l, rate: l.requests, level: new(big.Rat)}
	case FixedWindow:
		return &windowModel{l: l, counts: map[int64]int64{}}
	case Concurrency:
		return &concurrencyModel{l: l}
	default:
		return &windowModel{l: l, counts: map[int64]int64{}, sliding: true}
	}
}

// remainingOf is the whole requests in r, 0 when r is negative (debt).
func remainingOf(r *big.Rat) int64 {
	if r.Sign() < 0 {
		return 0
	}
	return ratFloor(r)
}

// debtOf is the whole requests r is below 0, rounded up: the units owed.
func debtOf(r *big.Rat) int64 {
	if r.Sign() >= 0 {
		return 0
	}
	n := new(big.Rat).Neg(r)
	if n.Cmp(new(big.Rat).SetInt64(math.MaxInt64)) > 0 {
		return math.MaxInt64 // Decision.Debt saturates
	}
	return ratCeil(n)
}

// ratFloor and ratCeil round r to an integer.
func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return q.Int64()
}

func ratCeil(r *big.Rat) int64 { return -ratFloor(new(big.Rat).Neg(r)) }

// time returns x·P/R rounded up: the time x tokens take to refill.
func (m *tokenModel) time(x *big.Rat) time.Duration {
	t := new(big.Rat).Mul(x, big.NewRat(m.l.period, m.rate))
	return time.Duration(ratCeil(t))
}

// tokenModel is a token bucket: tokens refill continuously at R per P up
// to the capacity; a charge takes cost tokens if there are that many.
// LeakyBucketQueue is the same with a delay until the bucket would hold
// its capacity again before the charge.
type tokenModel struct {
	l      Limit
	rate   int64 // requests per period the bucket refills at (see changeTo)
	tokens *big.Rat
	last   int64
	seen   bool
}

func (m *tokenModel) decide(now, cost int64) Decision {
	m.advance(now)
	missing := func() *big.Rat { return new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), m.tokens) }

	d := Decision{Remaining: remainingOf(m.tokens), Debt: debtOf(m.tokens), ResetAfter: m.time(missing())}
	switch {
	case cost > m.l.capacity:
		d.Code = OverCapacity
	case cost <= 0:
	case m.tokens.Cmp(big.NewRat(cost, 1)) >= 0:
		m.write()
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

// report is the decision reporting the bucket as it is: denied, with the
// wait for one token, when there is not one.
func (m *tokenModel) report() Decision {
	missing := new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), m.tokens)
	d := Decision{Remaining: remainingOf(m.tokens), Debt: debtOf(m.tokens), ResetAfter: m.time(missing)}
	if one := big.NewRat(1, 1); m.tokens.Cmp(one) < 0 {
		d.Code, d.RetryAfter = Denied, m.time(one.Sub(one, m.tokens))
	}
	return d
}

func (m *tokenModel) check(now int64) Decision {
	m.advance(now)
	return m.report()
}

// overdraft takes cost tokens whatever there are: the tokens may go
// negative (debt), down to capacity - maxMissing. It is denied when they
// are negative afterwards.
func (m *tokenModel) overdraft(now, cost int64) Decision {
	m.advance(now)
	if cost <= 0 {
		d := m.report()
		if m.tokens.Sign() >= 0 {
			d.Code, d.RetryAfter = Allowed, 0
		}
		return d
	}
	m.write()
	var delay time.Duration
	c := big.NewRat(cost, 1)
	if m.l.Algorithm() == LeakyBucketQueue && m.tokens.Cmp(c) >= 0 {
		delay = m.time(new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), m.tokens))
	}
	m.tokens.Sub(m.tokens, c)
	if least := new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), maxMissing(m.l)); m.tokens.Cmp(least) < 0 {
		m.tokens = least
	}
	d := m.report()
	if m.tokens.Sign() >= 0 {
		d.Code, d.RetryAfter, d.Delay = Allowed, 0, delay
	}
	return d
}

func (m *tokenModel) refund(now, units int64) Decision {
	m.advance(now)
	if units > 0 {
		m.write()
		m.tokens.Add(m.tokens, big.NewRat(units, 1))
		if full := big.NewRat(m.l.capacity, 1); m.tokens.Cmp(full) > 0 {
			m.tokens = full
		}
	}
	d := m.report()
	d.Code, d.RetryAfter = Allowed, 0
	return d
}

// write is a decision's writing the bucket: from now on it refills at its
// limit's rate, and what it misses is within the limit's bound on debt.
func (m *tokenModel) write() {
	m.rate = m.l.requests
	if least := new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), maxMissing(m.l)); m.tokens.Cmp(least) < 0 {
		m.tokens = least
	}
}

// changeTo keeps the tokens missing: the tokens change with the capacity.
func (m *tokenModel) changeTo(l Limit) {
	m.tokens.Add(m.tokens, big.NewRat(l.capacity-m.l.capacity, 1))
	m.l = l
}

func (m *tokenModel) advance(now int64) {
	if m.seen && now > m.last {
		refill := big.NewRat(now-m.last, 1)
		refill.Mul(refill, big.NewRat(m.rate, m.l.period))
		m.tokens.Add(m.tokens, refill)
		if full := big.NewRat(m.l.capacity, 1); m.tokens.Cmp(full) > 0 {
			m.tokens = full
		}
	}
	m.seen, m.last = true, max(now, m.last)
}

// levelModel is a leaky bucket meter: a level that drains continuously at
// R per P; a charge is admitted iff level + cost fits the capacity.
type levelModel struct {
	l     Limit
	rate  int64 // requests per period the level drains at (see changeTo)
	level *big.Rat
	last  int64
	seen  bool
}

// write is tokenModel.write for the level.
func (m *levelModel) write() {
	m.rate = m.l.requests
	if most := maxMissing(m.l); m.level.Cmp(most) > 0 {
		m.level = most
	}
}

// changeTo keeps the level.
func (m *levelModel) changeTo(l Limit) { m.l = l }

func (m *levelModel) advance(now int64) {
	if m.seen && now > m.last {
		drain := big.NewRat(now-m.last, 1)
		drain.Mul(drain, big.NewRat(m.rate, m.l.period))
		m.level.Sub(m.level, drain)
		if m.level.Sign() < 0 {
			m.level.SetInt64(0)
		}
	}
	m.seen, m.last = true, max(now, m.last)
}

func (m *levelModel) drainTime(x *big.Rat) time.Duration {
	return time.Duration(ratCeil(new(big.Rat).Mul(x, big.NewRat(m.l.period, m.rate))))
}

// report is the decision reporting the level as it is: denied, with the
// wait until one more fits, when one does not.
func (m *levelModel) report() Decision {
	room := new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), m.level)
	d := Decision{Remaining: remainingOf(room), Debt: debtOf(room), ResetAfter: m.drainTime(m.level)}
	if one := big.NewRat(1, 1); room.Cmp(one) < 0 {
		d.Code, d.RetryAfter = Denied, m.drainTime(one.Sub(one, room))
	}
	return d
}

func (m *levelModel) check(now int64) Decision {
	m.advance(now)
	return m.report()
}

// overdraft raises the level by cost whatever room there is: past the
// capacity (debt), up to maxMissing. It is denied when the level is above
// the capacity afterwards.
func (m *levelModel) overdraft(now, cost int64) Decision {
	m.advance(now)
	var delay time.Duration
	if cost > 0 {
		m.write()
		if m.l.Algorithm() == LeakyBucketQueue && new(big.Rat).Add(m.level, big.NewRat(cost, 1)).Cmp(big.NewRat(m.l.capacity, 1)) <= 0 {
			delay = m.drainTime(m.level) // after a change from leaky_bucket
		}
		m.level.Add(m.level, big.NewRat(cost, 1))
		if most := maxMissing(m.l); m.level.Cmp(most) > 0 {
			m.level = most
		}
	}
	d := m.report()
	if m.level.Cmp(big.NewRat(m.l.capacity, 1)) <= 0 {
		d.Code, d.RetryAfter, d.Delay = Allowed, 0, delay
	}
	return d
}

func (m *levelModel) refund(now, units int64) Decision {
	m.advance(now)
	if units > 0 {
		m.write()
		m.level.Sub(m.level, big.NewRat(units, 1))
		if m.level.Sign() < 0 {
			m.level.SetInt64(0)
		}
	}
	d := m.report()
	d.Code, d.RetryAfter = Allowed, 0
	return d
}

func (m *levelModel) decide(now, cost int64) Decision {
	m.advance(now)
	drainTime := m.drainTime
	room := func() *big.Rat { return new(big.Rat).Sub(big.NewRat(m.l.capacity, 1), m.level) }

	d := Decision{Remaining: remainingOf(room()), Debt: debtOf(room()), ResetAfter: drainTime(m.level)}
	switch {
	case cost > m.l.capacity:
		d.Code = OverCapacity
	case cost <= 0:
	case new(big.Rat).Add(m.level, big.NewRat(cost, 1)).Cmp(big.NewRat(m.l.capacity, 1)) <= 0:
		m.write()
		if m.l.Algorithm() == LeakyBucketQueue { // after a change from leaky_bucket
			d.Delay = drainTime(m.level)
		}
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

// changeTo keeps the counts.
func (m *windowModel) changeTo(l Limit) { m.l = l }

// decide reports only Code and Remaining: the tests check RetryAfter and
// ResetAfter by waiting them out instead. So do check, overdraft and
// refund.
func (m *windowModel) decide(now, cost int64) Decision {
	var d Decision
	switch {
	case cost > m.l.capacity:
		d.Code = OverCapacity
	case cost <= 0:
	case m.fits(now, cost):
		m.counts[now/m.l.period] += cost
	default:
		d.Code = Denied
	}
	d.Remaining, d.Debt = m.remaining(now), m.debt(now)
	return d
}

// used returns the estimate of the hits in the last period at now, with a
// further charge of c, times P.
func (m *windowModel) used(now, c int64) *big.Int {
	p := m.l.period
	k, e := now/p, now%p
	u := big.NewInt(m.counts[k] + c)
	u.Mul(u, big.NewInt(p))
	if m.sliding {
		prev := big.NewInt(m.counts[k-1])
		u.Add(u, prev.Mul(prev, big.NewInt(p-e)))
	}
	return u
}

// fits reports whether a charge of c fits at now.
func (m *windowModel) fits(now, c int64) bool {
	return m.used(now, c).Cmp(new(big.Int).Mul(big.NewInt(m.l.capacity), big.NewInt(m.l.period))) <= 0
}

func (m *windowModel) remaining(now int64) int64 {
	p := m.l.period
	free := new(big.Int).Mul(big.NewInt(m.l.capacity), big.NewInt(p))
	free.Sub(free, m.used(now, 0))
	if free.Sign() < 0 {
		return 0
	}
	return free.Div(free, big.NewInt(p)).Int64()
}

// debt returns the estimate at now beyond the limit, rounded up, or 0.
func (m *windowModel) debt(now int64) int64 {
	over := new(big.Rat).SetFrac(m.used(now, 0), big.NewInt(m.l.period))
	over.Sub(over, big.NewRat(m.l.capacity, 1))
	return max(ratCeil(over), 0)
}

func (m *windowModel) check(now int64) Decision {
	d := Decision{Remaining: m.remaining(now), Debt: m.debt(now)}
	if !m.fits(now, 1) {
		d.Code = Denied
	}
	return d
}

// overdraft adds cost to now's window whatever it holds, up to MaxCount;
// it is denied when the estimate is above the limit afterwards.
func (m *windowModel) overdraft(now, cost int64) Decision {
	if cost > 0 {
		k := now / m.l.period
		m.counts[k] = min(m.counts[k]+min(cost, MaxCount), MaxCount)
	}
	d := Decision{Remaining: m.remaining(now), Debt: m.debt(now)}
	if !m.fits(now, 0) {
		d.Code = Denied
	}
	return d
}

// refund takes units off now's window and then, for a sliding window, off
// the previous one, never below 0.
func (m *windowModel) refund(now, units int64) Decision {
	k := now / m.l.period
	for _, w := range []int64{k, k - 1} {
		if units <= 0 || (w != k && !m.sliding) {
			break
		}
		back := min(units, m.counts[w])
		m.counts[w] -= back
		units -= back
	}
	return Decision{Remaining: m.remaining(now), Debt: m.debt(now)}
}

// concurrencyModel keeps every unit in flight, oldest first, with the
// time it was charged: as runs of units charged at one instant (a charge
// of cost 5 is five units of one time). A unit charged at c expires at
// c + T + the rest of its slot: the last nanosecond of the slot of G =
// ceil(T/6) that holds c, plus T (so never before c + T, at most G-1
// later). A refund releases the oldest units; an overdraft's units in one
// slot stop at MaxInFlight. The clock never goes back, so the runs are in
// the order of their expiry too.
type concurrencyModel struct {
	l     Limit
	units []unitRun
}

// unitRun is n units charged at at.
type unitRun struct{ at, n int64 }

// changeTo keeps the units in flight.
func (m *concurrencyModel) changeTo(l Limit) { m.l = l }

// slot returns the length of a generation: the lease over 6, rounded up.
func (m *concurrencyModel) slot() int64 { return (m.l.period + 5) / 6 }

// expires returns when a unit charged at c expires.
func (m *concurrencyModel) expires(c int64) int64 {
	g := m.slot()
	return c + (g - 1 - c%g) + m.l.period
}

// live drops the units expired at now and returns how many are left.
func (m *concurrencyModel) live(now int64) int64 {
	kept, in := m.units[:0], int64(0)
	for _, r := range m.units {
		if m.expires(r.at) > now {
			kept = append(kept, r)
			in += r.n
		}
	}
	m.units = kept
	return in
}

// report is the bucket at now, with Denied and the RetryAfter of a cost
// of max(extra, 1) when extra more does not fit: the wait until enough
// units have expired, oldest first.
func (m *concurrencyModel) report(now, extra int64) Decision {
	in := m.live(now)
	d := Decision{Remaining: max(m.l.capacity-in, 0), Debt: max(in-m.l.capacity, 0)}
	if in > 0 {
		d.ResetAfter = time.Duration(m.expires(m.units[len(m.units)-1].at) - now)
	}
	if in+extra > m.l.capacity {
		d.Code = Denied
		excess := in + max(extra, 1) - m.l.capacity
		for _, r := range m.units {
			if excess -= r.n; excess <= 0 {
				d.RetryAfter = time.Duration(m.expires(r.at) - now)
				break
			}
		}
	}
	return d
}

// charge adds n units charged at now.
func (m *concurrencyModel) charge(now, n int64) {
	if k := len(m.units); k > 0 && m.units[k-1].at == now {
		m.units[k-1].n += n
		return
	}
	m.units = append(m.units, unitRun{now, n})
}

func (m *concurrencyModel) decide(now, cost int64) Decision {
	switch in := m.live(now); {
	case cost > m.l.capacity:
		d := m.report(now, 0)
		d.Code, d.RetryAfter = OverCapacity, 0
		return d
	case cost <= 0:
		d := m.report(now, 0)
		d.Code, d.RetryAfter = Allowed, 0
		return d
	case in+cost > m.l.capacity:
		return m.report(now, cost)
	}
	m.charge(now, cost)
	return m.report(now, 0)
}

func (m *concurrencyModel) check(now int64) Decision { return m.report(now, 1) }

func (m *concurrencyModel) overdraft(now, cost int64) Decision {
	m.live(now)
	var inSlot int64
	for _, r := range m.units {
		if r.at/m.slot() == now/m.slot() {
			inSlot += r.n
		}
	}
	if n := min(max(cost, 0), MaxInFlight-inSlot); n > 0 {
		m.charge(now, n)
	}
	return m.report(now, 0)
}

func (m *concurrencyModel) refund(now, units int64) Decision {
	m.live(now)
	for units > 0 && len(m.units) > 0 {
		back := min(units, m.units[0].n)
		m.units[0].n -= back
		units -= back
		if m.units[0].n == 0 {
			m.units = m.units[1:]
		}
	}
	d := m.report(now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return d
}

// refundAt takes units charged at c (≤ now) off c's window when that is
// now's window or, for a sliding window, the previous one, never below 0;
// a charge of an older window is refunded nothing.
func (m *windowModel) refundAt(now, units, c int64) Decision {
	k, w := now/m.l.period, c/m.l.period
	if units > 0 && (w == k || m.sliding && w == k-1) {
		m.counts[w] = max(m.counts[w]-units, 0)
	}
	return Decision{Remaining: m.remaining(now)}
}

// refundAt releases units charged at c (≤ now) from the units charged in
// c's slot, newest first, never below 0; units expired at now are gone and
// release nothing.
func (m *concurrencyModel) refundAt(now, units, c int64) Decision {
	m.live(now)
	for i := len(m.units) - 1; i >= 0 && units > 0; i-- {
		if m.units[i].at/m.slot() != c/m.slot() {
			continue
		}
		back := min(units, m.units[i].n)
		m.units[i].n -= back
		units -= back
	}
	kept := m.units[:0]
	for _, r := range m.units {
		if r.n > 0 {
			kept = append(kept, r)
		}
	}
	m.units = kept
	d := m.report(now, 0)
	d.Code, d.RetryAfter = Allowed, 0
	return d
}
