// Package store defines where bucket state lives and the one rule every
// store applies to a request's charges: all of them, or none.
//
// A store keeps an algorithms.State per bucket key and settles a request's
// charges at one instant of its own clock. The memory store
// (internal/store/memory) settles with Settle under its shard locks; a
// remote store settles the same way in one round trip.
package store

import (
	"context"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
)

// Charge is one bucket that a request charges.
type Charge struct {
	// Key identifies the bucket. Keys within one Apply call are distinct.
	// The store copies the key if it keeps it; the caller may reuse the
	// bytes after Apply returns.
	Key []byte
	// Domain is the policy domain the bucket belongs to: a distributed
	// store may keep one domain's buckets together (a Redis Cluster hash
	// slot), so that a request's charges settle in one place.
	Domain string
	// Limit decides the charge.
	Limit *algorithms.Limit
	// Cost is the number of hits; 0 is a peek.
	Cost int64
	// Shadow marks a charge whose denial does not deny the request. A
	// denied shadow charge is reported as denied and not applied.
	Shadow bool
}

// Store holds bucket state.
type Store interface {
	// Apply settles charges at one instant of the store's clock, as Settle
	// describes, writing decisions[i] for charges[i]; len(decisions) must
	// be len(charges). It returns an error only when the store itself
	// fails (a remote store unreachable), in which case nothing is known
	// to have been charged and decisions are undefined.
	Apply(ctx context.Context, charges []Charge, decisions []algorithms.Decision) error
}

// Settle decides charges against their buckets' states at now, all or
// nothing, and reports whether to commit.
//
// states[i] is charges[i]'s bucket state on entry and, on return, the
// state to store for it when Settle returns true (unchanged for peeks and
// denied shadows); when Settle returns false states is as on entry. decisions[i] receives charges[i]'s decision.
//
// The request is denied when any non-shadow charge is Denied or
// OverCapacity. Then Settle returns false: nothing is to be stored, and
// every charge that would have been admitted is reported as a peek — what
// its bucket holds now, uncharged — so that no status claims quota the
// request did not take.
func Settle(charges []Charge, states []algorithms.State, now int64, decisions []algorithms.Decision) (commit bool) {
	var small [16]algorithms.State
	before := small[:0]
	if len(states) > len(small) {
		before = make([]algorithms.State, 0, len(states))
	}
	before = append(before, states...)

	commit = true
	for i := range charges {
		c := &charges[i]
		next, d := c.Limit.Decide(states[i], now, c.Cost)
		decisions[i] = d
		if d.Code == algorithms.Allowed {
			states[i] = next
		} else if !c.Shadow {
			commit = false
		}
	}
	if commit {
		return true
	}
	for i := range charges {
		c := &charges[i]
		states[i] = before[i]
		if decisions[i].Code == algorithms.Allowed && c.Cost != 0 {
			_, decisions[i] = c.Limit.Decide(states[i], now, 0)
		}
	}
	return false
}
