package algorithms

import "fmt"

// Kind says how a charge is applied to its bucket: which of Limit's four
// decisions decides it (see "Checks, overdraft and refunds" in the package
// doc). How the charges of one request combine is the store's settle rule
// (package internal/store).
type Kind uint8

const (
	// Admit, the default, is Decide: the cost is admitted iff it fits now;
	// cost 0 is a peek.
	Admit Kind = iota
	// Check is Check: a cost of 1 decided, nothing charged (the cost is
	// ignored).
	Check
	// Overdraft is Overdraft: the cost taken in full, the bucket going
	// into debt if need be.
	Overdraft
	// Refund is Refund: the cost given back, never past rest.
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
