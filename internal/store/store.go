// Package store defines where bucket state lives and the one rule every
// store applies to a request's charges: its ordinary charges (Admit) all
// of them, or none; its overdraft charges and refunds always; its checks
// never (Settle states the rule).
//
// A store keeps an algorithms.State per bucket key and settles a request's
// charges at one instant of its own clock. The memory store
// (internal/store/memory) settles with Settle under its shard locks; a
// remote store settles the same way in one round trip.
package store

import (
	"context"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// Charge is one bucket that a request charges.
type Charge struct {
	// Key identifies the bucket. Keys within one Apply call are distinct,
	// but for probes (Probe), which may name the key of another charge.
	// The store copies the key if it keeps it; the caller may reuse the
	// bytes after Apply returns.
	Key []byte
	// Domain is the policy domain the bucket belongs to: a distributed
	// store may keep one domain's buckets together (a Redis Cluster hash
	// slot), so that a request's charges settle in one place.
	Domain string
	// Limit decides the charge.
	Limit *algorithms.Limit
	// Cost is the number of hits (for a Refund, the units given back); for
	// an Admit, 0 is a peek. A Cost ≤ 0 charges nothing whatever the Kind.
	Cost int64
	// Kind says how the charge is applied (algorithms.Kind); Admit when
	// zero. A Kind above Refund is taken as Admit.
	Kind algorithms.Kind
	// Shadow marks a charge whose denial does not deny the request. A
	// denied shadow Admit is reported as denied and not applied; a shadow
	// Overdraft or Refund is applied as any other.
	Shadow bool
	// Probe marks a charge that is decided and reported as its Kind says
	// but never applied (Applied is false): what the charge would decide on
	// its bucket as the request finds it. It may name the key of another
	// charge of the same Apply, the one that charges the bucket. A probe's
	// denial counts as any charge's, so one that must not deny the request
	// is Shadow too.
	Probe bool
	// Quota, when not 0, makes the charge one of a quota's: the charges of
	// a request with the same Quota are one quota descriptor's (its
	// limits' buckets), and a quota's denial does not deny the request by
	// itself — the request is denied by its quotas only when every one of
	// them is over its limit (Settle states the rule). 0: an ordinary
	// charge. Ignored on a Shadow charge, which never denies.
	Quota uint32
	// Counter, when not nil, asks a store that can keep the bucket as
	// envoyproxy/ratelimit keeps its counters to do so: a fixed window of
	// a whole number of seconds, kept as a plain count under Counter
	// followed by the start of the window in Unix seconds (Counter is
	// "<domain>_<key>_<value>_…_", as upstream names them). The engine
	// sets it only with engine.WithCounterKeys; a store that does not
	// keep such counters (the memory store) ignores it. The decisions are
	// the same either way. The caller may reuse the bytes after Apply.
	Counter []byte
}

// Decide decides c alone against its bucket's state s at now, as its Kind
// says (algorithms.Limit.Apply), and returns the state the bucket would
// have if c is applied (s for a Check) and c's decision. Settle combines
// such decisions.
func (c *Charge) Decide(s algorithms.State, now int64) (algorithms.State, algorithms.Decision) {
	return c.Limit.Apply(c.Kind, s, now, c.Cost)
}

// Applied reports whether c, decided d by Settle with the result admitted,
// changed its bucket: whether the store must write the state Settle left
// for it. An Overdraft or a Refund of Cost > 0 is always applied; an Admit
// of Cost > 0 iff it was Allowed and the request admitted; a Check or a
// Probe never.
func (c *Charge) Applied(d algorithms.Decision, admitted bool) bool {
	if c.Probe {
		return false
	}
	switch c.Kind {
	case algorithms.Check:
		return false
	case algorithms.Overdraft, algorithms.Refund:
		return c.Cost > 0
	}
	return admitted && c.Cost > 0 && d.Code == algorithms.Allowed
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

// Settle decides a request's charges against their buckets' states at now
// and reports whether the request is admitted. The combining rule:
//
//  1. Overdraft and Refund charges are always applied, whatever the other
//     charges decide: they record usage that already happened, or give it
//     back.
//  2. Admit charges are applied all or nothing: iff the request is admitted,
//     that is iff no non-shadow charge is denied, where a Check denies when
//     a cost of 1 would be denied, an Admit when its cost does not fit
//     (Denied or OverCapacity), and an Overdraft when it leaves its bucket
//     in debt. A Refund never denies.
//  3. An Admit that would have been admitted, in a request that is denied,
//     is not applied and reports its bucket as a peek would — what it holds
//     now, uncharged — so that no status claims quota the request did not
//     take. Every other charge reports its own decision: a denial with its
//     RetryAfter, a check, an overdraft charge or a refund as its Kind says.
//  4. A shadow Admit or Check never denies the request; a denied shadow
//     Admit is reported as denied and not applied. A shadow Overdraft or
//     Refund is applied as any other.
//  5. Quotas: the non-shadow charges with the same Quota (not 0) are one
//     quota. A quota has room when none of its charges is denied (in the
//     sense of 2), and is spent otherwise. A spent quota does not deny the
//     request by itself: the request's quotas deny it only when it has at
//     least one quota and every one is spent. When the request is
//     admitted, a spent quota's charges are treated as shadow charges are
//     (a denied Admit not applied), the others as any charge. So a request
//     with quotas q1…qn and ordinary charges is admitted iff no ordinary
//     charge denies and some qi has room; one quota alone decides as an
//     ordinary charge would.
//
// states[i] is charges[i]'s bucket state on entry and, on return, the state
// to store for it; charges[i].Applied(decisions[i], admitted) says whether
// it changed. decisions[i] receives charges[i]'s decision.
func Settle(charges []Charge, states []algorithms.State, now int64, decisions []algorithms.Decision) (admitted bool) {
	var small [16]algorithms.State
	before := small[:0]
	if len(states) > len(small) {
		before = make([]algorithms.State, 0, len(states))
	}
	before = append(before, states...)

	admitted = true
	quotas := false
	for i := range charges {
		c := &charges[i]
		next, d := c.Decide(states[i], now)
		decisions[i] = d
		if d.Code == algorithms.Allowed || c.Kind == algorithms.Overdraft {
			states[i] = next
		}
		switch {
		case c.Shadow:
		case c.Quota != 0:
			quotas = true
		case d.Code != algorithms.Allowed:
			admitted = false
		}
	}
	if admitted && quotas {
		admitted = !QuotasDeny(charges, decisions)
	}
	if admitted {
		return true
	}
	for i := range charges {
		c := &charges[i]
		if c.Kind == algorithms.Check || c.Kind == algorithms.Overdraft || c.Kind == algorithms.Refund {
			continue
		}
		states[i] = before[i]
		if decisions[i].Code == algorithms.Allowed && c.Cost > 0 {
			_, decisions[i] = c.Limit.Decide(states[i], now, 0)
		}
	}
	return false
}

// QuotasDeny reports whether the quotas of a request whose charges were
// decided decisions deny it (Settle's rule 5): whether it has a quota
// (a non-shadow charge with Quota not 0) and every quota has a denied
// charge. A decision counts as a denial when its Code is not Allowed. The
// decisions Settle reports for a denied request give the same answer as
// the ones it decided (an admitted Admit reported as a peek is Allowed).
func QuotasDeny(charges []Charge, decisions []algorithms.Decision) bool {
	// A quota has room when none of its charges is denied: find one.
	// Quotas are few (one per descriptor), so a quadratic scan that
	// allocates nothing is cheaper than a set.
	has := false
	for i := range charges {
		q := charges[i].Quota
		if q == 0 || charges[i].Shadow {
			continue
		}
		has = true
		first, room := true, true
		for j := range charges {
			if charges[j].Quota != q || charges[j].Shadow {
				continue
			}
			if j < i {
				first = false // decided with its quota's first charge
				break
			}
			if decisions[j].Code != algorithms.Allowed {
				room = false
			}
		}
		if first && room {
			return false
		}
	}
	return has
}
