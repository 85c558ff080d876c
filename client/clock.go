package client

import "time"

// Clock is the client's source of time: it dates the local short-circuit's
// denials and paces the waits that the HTTP middleware and the gRPC
// interceptors make (queue delays, the tarpit). The per-call deadline is
// not read from it: gRPC deadlines run on the real clock.
//
// A Clock must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed; at once for
	// d <= 0.
	After(d time.Duration) <-chan time.Time
}

// realClock is the system clock; time.Now carries a monotonic reading, so
// differences between two of its times do not jump with the wall clock.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
