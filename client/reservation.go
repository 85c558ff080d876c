package client

import (
	"context"
	"errors"
	"sync"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// Reservation is usage charged ahead of time, for work whose cost is known
// only once it is done (the tokens an LLM answer uses): Reserve charges an
// estimate, and Settle charges the difference once the actual cost is
// known, or Cancel gives the estimate back. It is safe for concurrent use;
// it settles once.
type Reservation struct {
	// Decision is Reserve's: whether the work may go ahead, as for Charge.
	Decision

	c           *Client
	domain      string
	descriptors []Descriptor // as given, with their operations and overdraft cleared
	held        uint32       // what the service charged: the estimate if it admitted it, else 0

	mu      sync.Mutex
	settled bool
}

// ErrSettled is returned by Settle and Cancel on a reservation that is
// already settled or cancelled.
var ErrSettled = errors.New("ratelimit: reservation already settled")

// ErrNotReserved is returned by Settle and Cancel on a reservation that was
// denied: there is nothing to settle, and the work must not go ahead.
var ErrNotReserved = errors.New("ratelimit: reservation was denied")

// Reserve charges estimate on each of descriptors (whatever their own
// WithHits, WithOperation and WithOverdraft) if it fits, all of them or
// none, as Charge does: the returned Reservation's Decision says whether
// the work may go ahead. The charge must fit whatever the policy says of
// overdraft (OVERDRAFT_NEVER): a reservation is made before the usage
// happens.
//
// An admitted reservation is later settled with Settle or given back with
// Cancel. A denied one holds nothing. When the failure policy decided
// (the service could not), the reservation holds nothing either: if it was
// admitted (fail open), Settle charges the whole actual cost.
//
// Reserve returns an error only when ctx ends before a decision, as Charge.
// The local short-circuit (WithLocalDeny) applies to Reserve as to Charge.
func (c *Client) Reserve(ctx context.Context, estimate uint32, domain string, descriptors ...Descriptor) (*Reservation, error) {
	r := &Reservation{c: c, domain: domain, descriptors: make([]Descriptor, len(descriptors))}
	for i, d := range descriptors {
		r.descriptors[i] = d.WithOperation(ratelimitv1.Operation_OPERATION_UNSPECIFIED).WithOverdraft(ratelimitv1.Overdraft_OVERDRAFT_UNSPECIFIED)
	}
	ask := make([]Descriptor, len(r.descriptors))
	for i, d := range r.descriptors {
		ask[i] = d.WithHits(estimate).WithOverdraft(ratelimitv1.Overdraft_OVERDRAFT_NEVER)
	}
	d, err := c.Charge(ctx, domain, ask...)
	if err != nil {
		return nil, err
	}
	r.Decision = d
	if d.Allowed && d.Source == SourceService {
		r.held = estimate
	}
	return r, nil
}

// Settle ends an admitted reservation with the work's actual cost: when
// actual is more than was reserved, the difference is charged in full
// (OVERDRAFT_ALWAYS: the usage happened, and the budget may go into debt);
// when it is less, the difference is refunded. When they are equal,
// nothing is sent and the reservation's own Decision (Reserve's, which
// admitted it) is returned.
//
// The returned Decision is otherwise the service's answer to that charge
// or refund: a charge that leaves a budget in debt is not Allowed, yet it
// was charged (Decision.Overdrew). When the service could not decide (the
// Decision's Source is a failure policy's), nothing is known to have been
// charged and the reservation stays open: Settle may be called again. It
// returns ErrNotReserved for a denied reservation, ErrSettled once settled
// or cancelled, and ctx's error when ctx ends first.
func (r *Reservation) Settle(ctx context.Context, actual uint32) (Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.open(); err != nil {
		return Decision{}, err
	}
	switch {
	case actual > r.held:
		return r.send(ctx, actual-r.held, func(d Descriptor) Descriptor {
			return d.WithOverdraft(ratelimitv1.Overdraft_OVERDRAFT_ALWAYS)
		})
	case actual < r.held:
		return r.send(ctx, r.held-actual, func(d Descriptor) Descriptor {
			return d.WithOperation(ratelimitv1.Operation_OPERATION_REFUND)
		})
	}
	r.settled = true
	return r.Decision, nil
}

// Cancel gives an admitted reservation back in full (a refund of what it
// holds), as Settle(ctx, 0) does. Its errors are Settle's.
func (r *Reservation) Cancel(ctx context.Context) (Decision, error) { return r.Settle(ctx, 0) }

// open reports why r cannot be settled, if it cannot. r.mu is held.
func (r *Reservation) open() error {
	switch {
	case !r.Allowed:
		return ErrNotReserved
	case r.settled:
		return ErrSettled
	}
	return nil
}

// send charges (or refunds) diff on every descriptor, as ask makes it
// ask, and marks r settled when the service answered. r.mu is held.
func (r *Reservation) send(ctx context.Context, diff uint32, ask func(Descriptor) Descriptor) (Decision, error) {
	ds := make([]Descriptor, len(r.descriptors))
	for i, d := range r.descriptors {
		ds[i] = ask(d.WithHits(diff))
	}
	d, err := r.c.Charge(ctx, r.domain, ds...)
	if err == nil && d.Source == SourceService {
		r.settled = true
	}
	return d, err
}
