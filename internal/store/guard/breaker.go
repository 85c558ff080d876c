package guard

import (
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the circuit breaker (Config.BreakerFailures and
// Config.BreakerCooloff).
const (
	DefaultBreakerFailures = 3
	DefaultBreakerCooloff  = time.Second
)

// BreakerState is the circuit breaker's state.
type BreakerState int32

const (
	// BreakerClosed: requests go to the remote.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the remote failed BreakerFailures times in a row; requests
	// are decided by the failure mode at once, without waiting for the remote,
	// until the cool-off has passed.
	BreakerOpen
	// BreakerHalfOpen: the cool-off has passed; one request (the probe)
	// goes to the remote, the others are still decided by the failure mode. The
	// probe's success closes the breaker, its failure opens it again for
	// another cool-off.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// breaker is the store's circuit breaker. Times are Config.Clock's
// nanoseconds. A success (a request that the remote answered) closes it from
// any state; failures (of requests and pings) count only in a row.
type breaker struct {
	threshold int
	cooloff   int64

	state       atomic.Int32 // a BreakerState, read without the lock
	transitions [3]atomic.Uint64

	fails atomic.Int32 // failures in a row; written with mu held

	mu       sync.Mutex
	openedAt int64 // when it last opened
	probing  bool  // half-open: the probe is in flight
	// lastFailed is the last failed batch counted.
	lastFailed uint64
	// changed, if not nil, is told of every transition (with mu held).
	changed func(from, to BreakerState)
}

func newBreaker(threshold int, cooloff time.Duration, changed func(from, to BreakerState)) *breaker {
	return &breaker{threshold: threshold, cooloff: int64(cooloff), changed: changed}
}

// State returns the breaker's state.
func (b *breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// allow reports whether a request may go to the remote at now, and whether it
// is the probe of a half-open breaker (whose outcome must be reported with
// done, or released with release).
func (b *breaker) allow(now int64) (ok, probe bool) {
	if b.State() == BreakerClosed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.State() {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if now-b.openedAt < b.cooloff {
			return false, false
		}
		b.set(BreakerHalfOpen)
	}
	if b.probing {
		return false, false
	}
	b.probing = true
	return true, true
}

// release gives up a probe whose outcome says nothing about the remote (its
// caller went away): the next request probes instead.
func (b *breaker) release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// done records an exchange with the remote at now: err nil for a success. A
// failure of a batch (exchange, above 0) that has been counted already is
// not counted again: the requests of one failed batch are one failure.
func (b *breaker) done(probe bool, err error, exchange uint64, now int64) {
	if err == nil && !probe && b.State() == BreakerClosed && b.fails.Load() == 0 {
		return // the common case, without the lock
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if err == nil {
		b.fails.Store(0)
		b.set(BreakerClosed)
		return
	}
	if exchange != 0 && exchange == b.lastFailed && !probe {
		return
	}
	if exchange != 0 {
		b.lastFailed = exchange
	}
	fails := b.fails.Add(1)
	switch b.State() {
	case BreakerClosed:
		if int(fails) >= b.threshold {
			b.open(now)
		}
	case BreakerHalfOpen:
		if probe {
			b.open(now)
		}
	}
}

func (b *breaker) open(now int64) {
	b.openedAt = now
	b.set(BreakerOpen)
}

// set moves to state s, counting the transition. b.mu must be held.
func (b *breaker) set(s BreakerState) {
	if from := BreakerState(b.state.Swap(int32(s))); from != s {
		b.transitions[s].Add(1)
		if b.changed != nil {
			b.changed(from, s)
		}
	}
}
