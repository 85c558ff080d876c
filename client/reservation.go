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
	// Decision is Reserve's: whether the work may go ahead, as for Check.
	Decision

	c           *Client
	domain      string
	descriptors []Descriptor // as given, with their operations cleared
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
// WithHits and WithOperation) if it fits, all of them or none, as Check
// does: the returned Reservation's Decision says whether the work may go
// ahead. The charge must fit whatever the policy says of overdraft
// (OPERATION_ADMIT): a reservation is made before the usage happens.
//
// An admitted reservation is later settled with Settle or given back with
// Cancel. A denied one holds nothing. When the failure policy decided
// (the service could not), the reservation holds nothing either: if it was
// admitted (fail open), Settle charges the whole actual cost.
//
// Reserve returns an error only when ctx ends before a decision, as Check.
// The local short-circuit (WithLocalDeny) applies to Reserve as to Check.
func (c *Client) Reserve(ctx context.Context, estimate uint32, domain string, descriptors ...Descriptor) (*Reservation, error) {
	r := &Reservation{c: c, domain: domain, descriptors: make([]Descriptor, len(descriptors))}
	for i, d := range descriptors {
		r.descriptors[i] = d.WithOperation(ratelimitv1.Operation_OPERATION_UNSPECIFIED)
	}
	ask := make([]Descriptor, len(r.descriptors))
	for i, d := range r.descriptors {
		ask[i] = d.WithHits(estimate).WithOperation(ratelimitv1.Operation_OPERATION_ADMIT)
	}
	d, err := c.Check(ctx, domain, ask...)
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
// actual is more than was reserved, the difference is charged as an
// overdraft charge (in full: the usage happened, and the budget may go
// into debt); when it is less, the difference is refunded. When they are
// equal, nothing is sent and the zero Decision is returned.
//
// The returned Decision is the service's answer to that charge or refund:
// an overdraft charge that leaves a budget in debt is not Allowed, yet it
// was charged. When the service could not decide (the Decision's Source is
// a failure policy's), nothing is known to have been charged and the
// reservation stays open: Settle may be called again. It returns
// ErrNotReserved for a denied reservation, ErrSettled once settled or
// cancelled, and ctx's error when ctx ends first.
func (r *Reservation) Settle(ctx context.Context, actual uint32) (Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.open(); err != nil {
		return Decision{}, err
	}
	var (
		op   ratelimitv1.Operation
		diff uint32
	)
	switch {
	case actual > r.held:
		op, diff = ratelimitv1.Operation_OPERATION_OVERDRAFT, actual-r.held
	case actual < r.held:
		op, diff = ratelimitv1.Operation_OPERATION_REFUND, r.held-actual
	default:
		r.settled = true
		return Decision{}, nil
	}
	return r.send(ctx, op, diff)
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

// send charges (or refunds) diff on every descriptor with op and marks r
// settled when the service answered. r.mu is held.
func (r *Reservation) send(ctx context.Context, op ratelimitv1.Operation, diff uint32) (Decision, error) {
	ds := make([]Descriptor, len(r.descriptors))
	for i, d := range r.descriptors {
		ds[i] = d.WithHits(diff).WithOperation(op)
	}
	d, err := r.c.Check(ctx, r.domain, ds...)
	if err == nil && d.Source == SourceService {
		r.settled = true
	}
	return d, err
}
