package redis

import (
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// denyCache remembers denials: a bucket that denied a cost c at local time
// t with RetryAfter r denies c again until t+r, whatever else happens
// meanwhile, because charges only ever take from a bucket and the wait is
// exact: the cache answers as Redis would, with the wait that is left. It
// holds at most max buckets; when full, it drops the expired ones (at most
// once a second), and remembers no new one while none has expired.
type denyCache struct {
	mu        sync.Mutex
	max       int
	entries   map[string]denial
	lastSweep int64
}

type denial struct {
	until   int64 // local nanoseconds: the denial holds while now < until
	cost    int64 // the cost denied
	decided int64 // when it was denied
	d       algorithms.Decision
}

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// deny reports whether a remembered denial denies the request charges at
// now; if so it fills decisions: the remembered charges denied with the
// wait left, the others as a bucket at rest reports them uncharged.
func (c *denyCache) deny(charges []store.Charge, decisions []algorithms.Decision, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 {
		return false
	}
	hit := false
	for i := range charges {
		ch := &charges[i]
		if ch.Shadow || ch.Cost <= 0 {
			continue
		}
		if e, ok := c.entries[string(ch.Key)]; ok && now < e.until && ch.Cost == e.cost {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	for i := range charges {
		ch := &charges[i]
		e, ok := c.entries[string(ch.Key)]
		if ok && !ch.Shadow && ch.Cost > 0 && now < e.until && ch.Cost == e.cost {
			d := e.d
			d.RetryAfter = time.Duration(e.until - now)
			d.ResetAfter = max(d.ResetAfter-time.Duration(now-e.decided), 0)
			decisions[i] = d
			continue
		}
		_, d := ch.Limit.Decide(algorithms.State{}, now, ch.Cost)
		if d.Code == algorithms.Allowed && ch.Cost > 0 {
			_, d = ch.Limit.Decide(algorithms.State{}, now, 0)
		}
		decisions[i] = d
	}
	return true
}

// remember keeps the denials of non-shadow charges among decisions.
func (c *denyCache) remember(charges []store.Charge, decisions []algorithms.Decision, now int64) {
	for i := range charges {
		if charges[i].Shadow || decisions[i].Code != algorithms.Denied {
			continue
		}
		c.mu.Lock()
		if len(c.entries) >= c.max && now-c.lastSweep >= int64(time.Second) {
			c.sweepLocked(now)
		}
		if len(c.entries) < c.max || c.has(charges[i].Key) {
			d := decisions[i]
			c.entries[string(charges[i].Key)] = denial{until: now + int64(d.RetryAfter), cost: charges[i].Cost, decided: now, d: d}
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
