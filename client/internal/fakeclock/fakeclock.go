// Package fakeclock is a client.Clock for tests: time moves only when the
// test says so, and a test can wait until code under test is blocked on a
// timer before moving it, so no test sleeps to get its timing.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a fake client.Clock. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []timer
	changed chan struct{} // closed and replaced whenever timers are added
}

type timer struct {
	at time.Time
	ch chan time.Time
}

// New returns a Clock reading now.
func New(now time.Time) *Clock {
	return &Clock{now: now, changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives when the clock has been advanced by
// d or more; at once for d <= 0.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, timer{at: c.now.Add(d), ch: ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the clock by d and fires every timer that is then due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// Timers reports how many timers are waiting to fire.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers blocks until at least n timers are waiting to fire, or
// done is closed (it then returns false). Timers abandoned by their caller
// still count until they fire.
func (c *Clock) WaitForTimers(n int, done <-chan struct{}) bool {
	for {
		c.mu.Lock()
		count, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if count >= n {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}
