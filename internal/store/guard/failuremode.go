package guard

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// FailureMode is what Apply decides when the remote store cannot answer.
type FailureMode uint8

const (
	// FailOpen decides every charge as if its bucket were at rest: the
	// request is admitted unless a cost exceeds a capacity, and nothing is
	// charged anywhere (an overdraft charge or a refund is not recorded).
	FailOpen FailureMode = iota
	// FailClosed denies every charge of cost above 0 and every check, with
	// RetryAfter FailClosedRetryAfter (an admit over capacity is still
	// OverCapacity); peeks and refunds are allowed and report 0 remaining.
	// Nothing is recorded.
	FailClosed
)

// FailClosedRetryAfter is the RetryAfter of a charge denied by FailClosed.
const FailClosedRetryAfter = time.Second

// String returns "open" or "closed".
func (m FailureMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// Set parses "open" or "closed" (a flag.Value).
func (m *FailureMode) Set(s string) error {
	switch s {
	case "open":
		*m = FailOpen
	case "closed":
		*m = FailClosed
	default:
		return fmt.Errorf("failure mode %q: want open or closed", s)
	}
	return nil
}

// decide writes into decisions what the mode decides for charges at the
// local time now, as a request of their own.
func (m FailureMode) decide(charges []store.Charge, now int64, decisions []algorithms.Decision) {
	if m == FailOpen {
		store.Settle(charges, make([]algorithms.State, len(charges)), now, decisions)
		return
	}
	for i := range charges {
		m.decideClosed(charges, i, decisions)
	}
}

// decideDenied writes into decisions[i], i in idx, what the mode decides
// for charges[i] at now as charges of a request that is denied anyway.
func (m FailureMode) decideDenied(charges []store.Charge, idx []int, now int64, decisions []algorithms.Decision) {
	if m == FailOpen {
		atRest(charges, idx, true, now, decisions)
		return
	}
	for _, i := range idx {
		m.decideClosed(charges, i, decisions)
	}
}

// decideClosed writes FailClosed's decision for charges[i].
func (FailureMode) decideClosed(charges []store.Charge, i int, decisions []algorithms.Decision) {
	c := &charges[i]
	switch {
	case c.Kind == algorithms.Check:
		decisions[i] = algorithms.Decision{Code: algorithms.Denied, RetryAfter: FailClosedRetryAfter}
	case c.Cost <= 0 || c.Kind == algorithms.Refund:
		decisions[i] = algorithms.Decision{}
	case c.Cost > c.Limit.Capacity() && c.Kind != algorithms.Overdraft:
		decisions[i] = algorithms.Decision{Code: algorithms.OverCapacity}
	default:
		decisions[i] = algorithms.Decision{Code: algorithms.Denied, RetryAfter: FailClosedRetryAfter}
	}
}

// atRest writes into decisions[i], i in idx, what store.Settle reports for
// those charges at now on buckets at rest: as a request of their own, or,
// when denied, as charges of a request that is denied anyway (Settle then
// reports the admissible ones as peeks).
func atRest(charges []store.Charge, idx []int, denied bool, now int64, decisions []algorithms.Decision) {
	if len(idx) == 0 {
		return
	}
	sub := make([]store.Charge, 0, len(idx)+1)
	for _, i := range idx {
		sub = append(sub, charges[i])
	}
	if denied {
		// A charge over its capacity denies the request, as the denial
		// elsewhere does.
		l := sub[0].Limit
		sub = append(sub, store.Charge{Limit: l, Cost: l.Capacity() + 1})
	}
	d := make([]algorithms.Decision, len(sub))
	store.Settle(sub, make([]algorithms.State, len(sub)), now, d)
	for j, i := range idx {
		decisions[i] = d[j]
	}
}
