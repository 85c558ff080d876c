// Package clock is the one source of time for decisions: integer
// nanoseconds since the Unix epoch that never step backwards.
//
// Decisions need two properties at once: windows align to the Unix epoch
// (as Envoy's rate limit service aligns them), and time must not jump when
// the wall clock is stepped (NTP, an operator). A Monotonic clock reads the
// wall clock once, at creation, and from then on advances by the runtime's
// monotonic clock only.
//
// Time is injected one way: a part that keeps time takes a Clock once, as
// an argument or a field of its configuration (memory.New, guard.Config,
// redis.Config, daemon.Config), and takes its decisions' time from it alone
// (timeouts and tickers use the runtime's timers); a test passes a
// Fake there. The Redis store alone defaults to another clock than
// Monotonic: Redis's own (TIME), shared by every daemon on that Redis.
package clock

import (
	"sync/atomic"
	"time"
)

// Clock returns the current time in nanoseconds since the Unix epoch.
type Clock interface {
	Now() int64
}

// Monotonic is the real clock: the wall time at creation plus the monotonic
// time elapsed since. It is safe for concurrent use.
type Monotonic struct {
	start time.Time // carries a monotonic reading
	base  int64     // start as Unix nanoseconds
}

// NewMonotonic returns a Monotonic clock anchored at the wall time now.
func NewMonotonic() *Monotonic {
	start := time.Now()
	return &Monotonic{start: start, base: start.UnixNano()}
}

// Now returns the anchored wall time plus the monotonic time since.
func (m *Monotonic) Now() int64 {
	return m.base + int64(time.Since(m.start))
}

// Fake is a clock for tests that moves only when told. It is safe for
// concurrent use.
type Fake struct {
	now atomic.Int64
}

// NewFake returns a Fake clock reading now (Unix nanoseconds).
func NewFake(now int64) *Fake {
	f := &Fake{}
	f.now.Store(now)
	return f
}

// Now returns the fake time.
func (f *Fake) Now() int64 { return f.now.Load() }

// Set moves the clock to now, backwards included (to test that a clock
// stepping back never grants extra).
func (f *Fake) Set(now int64) { f.now.Store(now) }

// Advance moves the clock by d.
func (f *Fake) Advance(d time.Duration) { f.now.Add(int64(d)) }
