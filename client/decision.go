package client

import (
	"fmt"
	"time"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// Source says who made a Decision.
type Source int

const (
	// SourceService: the service decided.
	SourceService Source = iota
	// SourceLocal: the local short-circuit denied the request without a
	// call, because the service had denied the same request and the retry
	// time it gave then has not yet passed (see WithLocalDeny).
	SourceLocal
	// SourceFailOpen: the service could not decide (unreachable, too slow,
	// or an error), and the failure policy admitted the request.
	SourceFailOpen
	// SourceFailClosed: the service could not decide, and the failure
	// policy denied the request (see WithFailClosed).
	SourceFailClosed
)

func (s Source) String() string {
	switch s {
	case SourceService:
		return "service"
	case SourceLocal:
		return "local"
	case SourceFailOpen:
		return "fail-open"
	case SourceFailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Decision is the answer to Charge.
type Decision struct {
	// Allowed reports whether the request may go through (after Delay).
	Allowed bool
	// Source says who decided.
	Source Source
	// RetryAfter, for a denial, is the shortest wait after which the same
	// request would be admitted if nothing else arrived: the service's
	// retry_after, what is left of it for a local denial, or the
	// fail-closed wait. 0 when allowed and when Never. For a concurrency
	// limit (ALGORITHM_CONCURRENCY) it is when enough units expire by their
	// lease if none is released; a release admits sooner.
	RetryAfter time.Duration
	// Never reports a denial that no wait can turn into an admission: a
	// descriptor costs more than its limit's capacity (its status is
	// CODE_OVER_CAPACITY, and not in shadow mode).
	Never bool
	// Delay, for an allowed request, is how long it must wait before it
	// proceeds: the longest leaky_bucket_queue delay among its descriptors
	// whose rules are not in shadow mode (a shadow rule only observes; it
	// never holds a request back). The request has been admitted and
	// charged already; waiting is how it keeps the queue's output smooth.
	Delay time.Duration
	// Policy, for a denial by the service or the short-circuit, names what
	// denied: the rule of the status MostRestrictive picks, by its name, or
	// by the descriptor's entries when the rule has no name. Empty
	// otherwise.
	Policy string
	// Overdrew reports that a charge of the request was taken in full on a
	// limit that had less left than its cost, which is now in debt (a
	// status's overdrew): the usage was counted, though Allowed is false.
	// Only a charge that may overdraw does (Descriptor.WithOverdraft, or
	// the policy's overdraft: true); only with Source SourceService.
	Overdrew bool
	// Response is the service's answer, with a status per descriptor; nil
	// unless Source is SourceService.
	Response *ratelimitv1.ShouldRateLimitResponse
	// Err, for SourceFailOpen and SourceFailClosed, is why the service could
	// not decide: a gRPC status error (Unavailable, DeadlineExceeded,
	// InvalidArgument, ...).
	Err error
}

// MostRestrictive returns the index, in Response's statuses, of the status
// whose limit binds the request hardest, as the service names it
// (ShouldRateLimitResponse.most_restrictive, which states the order): for
// a denial, the one Policy names; it is also the one httplimit's
// RateLimit headers describe. It is -1 when Response is nil (a local or
// failure-policy decision), when no status counts, or when the service
// names a status the response does not hold.
func (d Decision) MostRestrictive() int {
	i := int(d.Response.GetMostRestrictive()) - 1
	if i >= len(d.Response.GetStatuses()) {
		return -1
	}
	return i
}

// String explains the decision in one line fit for the person whose
// request it is, as "throttled by policy 'per-user-per-endpoint'; retry
// after 120 ms". Waits are rounded up: under a second to whole
// milliseconds, from a second on to whole seconds, so waiting the stated
// time is always enough. It names no internal error.
func (d Decision) String() string {
	switch {
	case d.Source == SourceFailClosed:
		return "rate limit service unavailable, failing closed; retry after " + formatWait(d.RetryAfter)
	case d.Source == SourceFailOpen:
		return "allowed: rate limit service unavailable, failing open"
	case d.Allowed && d.Delay > 0:
		return "allowed after a queue delay of " + formatWait(d.Delay)
	case d.Allowed:
		return "allowed"
	case d.Never:
		return fmt.Sprintf("throttled by policy '%s'; the request costs more than the limit's capacity, so no wait will admit it", d.Policy)
	}
	return fmt.Sprintf("throttled by policy '%s'; retry after %s", d.Policy, formatWait(d.RetryAfter))
}

// formatWait writes a wait for people, rounded up: "0 ms" for d <= 0, whole
// milliseconds under a second ("120 ms", and "1 ms" for 1ns), whole seconds
// from one second on ("1 s", and "2 s" for 1.2s).
func formatWait(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", ceilDiv(d, time.Millisecond))
	}
	return fmt.Sprintf("%d s", ceilDiv(d, time.Second))
}

func ceilDiv(d, unit time.Duration) int64 {
	return int64((d-1)/unit) + 1
}
