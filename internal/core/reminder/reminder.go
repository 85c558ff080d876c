// Package reminder decides when a condition that persists is worth another
// log line: once as it starts, then at most once per interval while it
// lasts, however often it is seen again meanwhile.
//
// A Redis that is down makes the circuit breaker open again after every
// failed probe, once per cool-off (a second by default): without a
// Reminder that is a warning a second for as long as Redis is down. With
// one, it is the warning as Redis goes down, a reminder every interval
// ("still down, for 5m, 300 probes failed") and the line saying it is
// back.
package reminder

import (
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
)

// DefaultInterval is the reminders' default interval.
const DefaultInterval = time.Minute

// Reminder tracks one condition. It is safe for concurrent use.
type Reminder struct {
	interval int64
	clock    clock.Clock

	mu       sync.Mutex
	on       bool
	since    int64 // when the condition started
	reminded int64 // when it was last logged (started or reminded)
	repeats  int   // times seen again since it was last logged
}

// New returns a Reminder, the condition off, that reminds every interval
// (DefaultInterval when interval is not positive), reading c.
func New(c clock.Clock, interval time.Duration) *Reminder {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Reminder{interval: int64(interval), clock: c}
}

// Start reports the condition seen: log is true when it was off (it starts
// now: log that it did) or when an interval has passed since it was last
// logged (remind). since is how long ago it started; repeats is how many
// times it was seen since the last line that was logged, this time
// included (1 as it starts).
func (r *Reminder) Start() (log bool, since time.Duration, repeats int) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.repeats++
	if !r.on {
		r.on, r.since, r.reminded, r.repeats = true, now, now, 0
		return true, 0, 1
	}
	if now-r.reminded < r.interval {
		return false, time.Duration(now - r.since), r.repeats
	}
	repeats = r.repeats
	r.reminded, r.repeats = now, 0
	return true, time.Duration(now - r.since), repeats
}

// Stop reports the condition over: log is true when it was on (log that it
// ended), and since is then how long it lasted.
func (r *Reminder) Stop() (log bool, since time.Duration) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return false, 0
	}
	r.on, r.repeats = false, 0
	return true, time.Duration(now - r.since)
}
