package client

import (
	"context"
	"errors"
	"sync/atomic"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// Lease is units in flight, held for the length of some work against
// concurrency limits (a policy's algorithm: concurrency, with
// max_in_flight and lease): Acquire takes them, Release gives them back.
// A unit never released — the process died, or the release could not
// reach the service — frees itself when its lease ends (the policy's
// lease after it was taken, and at most a sixth of the lease later), so
// a lost release costs capacity for a while, never for good. It is safe
// for concurrent use; it releases once.
type Lease struct {
	// Decision is Acquire's: whether the work may start, as for Charge.
	Decision

	c        *Client
	domain   string
	refund   []Descriptor // what Release sends; nil when the lease holds nothing
	released atomic.Bool
}

// ErrReleased is returned by Release on a lease that was released already.
var ErrReleased = errors.New("ratelimit: lease already released")

// Acquire takes each descriptor's cost (1 unless given WithHits) in flight,
// all of them or, when any denies, none, as Charge does: the returned
// Lease's Decision says whether the work may start. The charge must fit,
// whatever the descriptors' WithOperation and WithOverdraft or the policy
// say (an OPERATION_CHARGE with OVERDRAFT_NEVER): a concurrency admits a
// charge while in flight + cost ≤ max_in_flight.
//
// Name only descriptors whose rules are concurrency limits: Release
// refunds every one, and a refund on a rate limit gives its budget back.
// To limit the same work by rate too, Charge the rate's descriptors apart
// (httplimit and grpclimit stack a rate middleware in front of a
// concurrency one).
//
// An admitted lease holds its units until Release. A denied lease holds
// nothing; its Decision says why, as Charge's: Policy names the rule, and
// RetryAfter is the service's, the wait until the oldest unit in flight
// would free itself at its lease end if none were released (a release may
// free one sooner). When the service cannot decide, the failure policy
// does, as for Charge (admitted by default, denied with WithFailClosed),
// and the lease holds nothing: the work runs, or not, uncounted.
//
// The local short-circuit (WithLocalDeny) never applies to Acquire: any
// release may free a unit, so a denial says nothing of the next request.
// Acquire returns an error only when ctx ends before a decision, as Charge.
func (c *Client) Acquire(ctx context.Context, domain string, descriptors ...Descriptor) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ask := make([]Descriptor, len(descriptors))
	for i, d := range descriptors {
		ask[i] = d.WithOperation(ratelimitv1.Operation_OPERATION_CHARGE).WithOverdraft(ratelimitv1.Overdraft_OVERDRAFT_NEVER)
	}
	d, err := c.ask(ctx, domain, ask)
	if err != nil {
		return nil, err
	}
	l := &Lease{Decision: d, c: c, domain: domain}
	if d.Allowed && d.Source == SourceService {
		l.refund = make([]Descriptor, len(descriptors))
		for i, d := range descriptors {
			l.refund[i] = d.WithOperation(ratelimitv1.Operation_OPERATION_REFUND).WithOverdraft(ratelimitv1.Overdraft_OVERDRAFT_UNSPECIFIED)
		}
	}
	return l, nil
}

// Release gives back the units an admitted lease holds: one v1 call that
// refunds the same descriptors with the same costs as Acquire charged
// (OPERATION_REFUND; a concurrency releases its oldest units, never going
// below zero). It returns nil once the service has taken the refund.
//
// Release sends at most once. A second call returns ErrReleased; a lease
// that holds nothing (denied, or decided by the failure policy) returns
// nil without a call.
//
// The call has the client's deadline (WithTimeout), within ctx: release
// work that ended for any reason, a cancelled request's included, with a
// context that the request's end does not cancel
// (context.WithoutCancel). When the refund does not reach the service —
// unreachable, too slow, answering with an error, or ctx ended — Release
// returns that error, reports it to the WithReleaseFailureHook hook and,
// at the first of a run, to the log, and does not retry: a refund that
// did arrive, retried, would free another caller's unit. The units stay
// in flight until their lease ends.
func (l *Lease) Release(ctx context.Context) error {
	if l.refund == nil {
		return nil
	}
	if l.released.Swap(true) {
		return ErrReleased
	}
	c := l.c
	if _, err := c.call(ctx, l.domain, l.refund); err != nil {
		if c.releaseFailures.Add(1) == 1 {
			c.logger.Warn("ratelimit: a release did not reach the service; its units stay in flight until their lease ends", "error", err)
		}
		if c.onRelease != nil {
			c.onRelease(err)
		}
		return err
	}
	if c.releaseFailures.Load() != 0 {
		if n := c.releaseFailures.Swap(0); n > 0 {
			c.logger.Info("ratelimit: releases reaching the service again", "failures", n)
		}
	}
	return nil
}
