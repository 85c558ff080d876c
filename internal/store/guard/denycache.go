package guard

import (
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// denyCache remembers denials: a bucket that denied a cost c, in a request
// sent at local time t, with RetryAfter r, denies c again until t+r,
// whatever else happens meanwhile, because charges only ever take from a
// bucket and the wait is exact, counted from when the script ran, which is
// no earlier than t: the cache answers as the remote would, with the wait that
// is left, and never for longer. It holds at most max buckets; when full,
// it drops the expired ones (at most once a second), and remembers no new
// one while none has expired.
//
// Refunds are the exception to "charges only take": a refund through this
// store forgets the bucket's denial, and a request that holds an overdraft
// charge or a refund is never answered from the cache (they must reach
// the remote, whatever the request decides); an overdraft's denial, which
// charged, is not remembered. A check is a cost of 1: a denial of a check
// or of an admit of cost 1 answers both. A refund made through another
// daemon is seen here only once the remembered wait has passed.
type denyCache struct {
	mu        sync.Mutex
	max       int
	entries   map[string]denial
	lastSweep int64
}

type denial struct {
	until int64 // local nanoseconds: the denial holds while now < until
	cost  int64 // the cost denied
	sent  int64 // when the request that was denied was sent
	d     algorithms.Decision
}

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// denial returns the remembered denial that denies ch at now, if any: of
// the same cost, its wait not over; peeks, shadow charges, overdraft
// charges and refunds never are. c.mu must be held.
func (c *denyCache) denial(ch *store.Charge, now int64) (denial, bool) {
	cost, ok := cachedCost(ch)
	if !ok {
		return denial{}, false
	}
	e, ok := c.entries[string(ch.Key)]
	if !ok || now >= e.until || cost != e.cost {
		return denial{}, false
	}
	return e, true
}

// cachedCost returns the cost under which a denial of ch is remembered:
// its cost for an admit, 1 for a check; false for a charge whose denial is
// never remembered nor answered from the cache (a shadow charge, a quota's,
// whose denial denies only with every other quota's, a peek, an overdraft
// charge or a refund).
func cachedCost(ch *store.Charge) (int64, bool) {
	switch {
	case ch.Shadow, ch.Quota != 0:
		return 0, false
	case ch.Kind == algorithms.Check:
		return 1, true
	case ch.Kind == algorithms.Admit && ch.Cost > 0:
		return ch.Cost, true
	}
	return 0, false
}

// applied reports whether charges hold an overdraft charge or a refund:
// a request that must reach the remote.
func applied(charges []store.Charge) bool {
	for i := range charges {
		if k := charges[i].Kind; (k == algorithms.Overdraft || k == algorithms.Refund) && charges[i].Cost > 0 {
			return true
		}
	}
	return false
}

// deny reports whether a remembered denial denies the request charges at
// now; if so it fills decisions: the remembered charges denied with the
// wait left, the others as store.Settle reports a denied request's on
// buckets at rest (not read from the remote, and uncharged).
func (c *denyCache) deny(charges []store.Charge, decisions []algorithms.Decision, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 || applied(charges) {
		return false
	}
	hit := false
	for i := range charges {
		if _, ok := c.denial(&charges[i], now); ok {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	var others []int
	for i := range charges {
		e, ok := c.denial(&charges[i], now)
		if !ok {
			others = append(others, i)
			continue
		}
		d := e.d
		d.RetryAfter = time.Duration(e.until - now)
		d.ResetAfter = max(d.ResetAfter-time.Duration(now-e.sent), 0)
		decisions[i] = d
	}
	atRest(charges, others, true, now, decisions)
	return true
}

// remember keeps the denials of non-shadow admits and checks among
// decisions, of a request sent at local time sent, and forgets those of
// the buckets it refunded.
func (c *denyCache) remember(charges []store.Charge, decisions []algorithms.Decision, sent int64) {
	for i := range charges {
		if charges[i].Kind == algorithms.Refund && charges[i].Cost > 0 {
			c.mu.Lock()
			delete(c.entries, string(charges[i].Key))
			c.mu.Unlock()
			continue
		}
		cost, ok := cachedCost(&charges[i])
		if !ok || decisions[i].Code != algorithms.Denied {
			continue
		}
		c.mu.Lock()
		if len(c.entries) >= c.max && sent-c.lastSweep >= int64(time.Second) {
			c.sweepLocked(sent)
		}
		if len(c.entries) < c.max || c.has(charges[i].Key) {
			d := decisions[i]
			c.entries[string(charges[i].Key)] = denial{until: sent + int64(d.RetryAfter), cost: cost, sent: sent, d: d}
		}
		c.mu.Unlock()
	}
}

func (c *denyCache) has(key []byte) bool {
	_, ok := c.entries[string(key)]
	return ok
}

func (c *denyCache) sweep(now int64) {
	c.mu.Lock()
	c.sweepLocked(now)
	c.mu.Unlock()
}

func (c *denyCache) sweepLocked(now int64) {
	c.lastSweep = now
	for k, e := range c.entries {
		if now >= e.until {
			delete(c.entries, k)
		}
	}
}

func (c *denyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
