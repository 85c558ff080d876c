package algorithms

import "fmt"

// Kind says how a charge is applied to its bucket: which of Limit's
// decisions (Decide, Check, Overdraft, Refund) decides it. How the charges
// of one request combine is the store's rule (internal/store, Settle).
type Kind uint8

const (
	// Admit is the default: Decide. The cost is admitted iff it fits now;
	// cost 0 is a peek.
	Admit Kind = iota
	// Check is Check: decided as a charge of cost 1 would be right now,
	// charging nothing (the cost is ignored). Allowed, it reports the
	// bucket as a peek does; denied, with the RetryAfter of a cost of 1.
	Check
	// Overdraft is Overdraft: the cost is taken in full whatever is left,
	// and the bucket may go into debt (bounded; see the package doc). Its
	// decision reports the bucket after the charge, Denied when that leaves
	// the bucket in debt (as envoyproxy/ratelimit answers OVER_LIMIT once
	// its counter passes the limit), Allowed otherwise.
	Overdraft
	// Refund is Refund: the cost is given back, never past the bucket's
	// rest state. Always Allowed; its decision reports the bucket after
	// the refund.
	Refund
)

var kindNames = [...]string{Admit: "admit", Check: "check", Overdraft: "overdraft", Refund: "refund"}

// String returns "admit", "check", "overdraft" or "refund".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Apply decides a charge of kind k and cost against the bucket in state s
// at now, and returns the state the bucket has if the charge is applied
// (s for a Check) and the charge's decision: Decide, Check, Overdraft or
// Refund as k says. A Kind above Refund is taken as Admit.
func (l *Limit) Apply(k Kind, s State, now, cost int64) (State, Decision) {
	switch k {
	case Admit: // first: the ordinary charge's path
		return l.Decide(s, now, cost)
	case Check:
		return s, l.Check(s, now)
	case Overdraft:
		return l.Overdraft(s, now, cost)
	case Refund:
		return l.Refund(s, now, cost)
	}
	return l.Decide(s, now, cost)
}
