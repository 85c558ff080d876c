// Package store keeps bucket state and settles each request's charges by
// one rule, the settle rule, which every store applies: the memory store
// (internal/store/memory) with Settle under its shard locks, a remote
// store in one round trip (the Redis store's settle.lua).
//
// A request's charges are decided at one instant of the store's clock,
// each alone against its bucket as the request finds it, as its
// algorithms.Kind says. A charge denies when its decision is not Allowed:
// an Admit whose cost does not fit, a Check when a cost of 1 would not
// fit, an Overdraft that leaves its bucket in debt (a Refund never
// denies). The request is admitted iff no charge denies it, where a Shadow
// charge never does and quotas deny only together: the charges with one
// Charge.Quota (not 0, not Shadow) are one quota, spent when any of them denies, and a
// request's quotas deny it iff it has at least one and every one is spent.
//
// An admitted request applies every charge but a denied Admit (a Shadow's
// or a spent quota's). A denied request applies only its Overdrafts and
// Refunds, which record usage that already happened or give it back: its
// Admits are all or nothing. A Check or a probe is never applied.
//
// Each charge reports its own decision, but for an Admit Allowed in a
// denied request, which reports its bucket as a peek would, uncharged: no
// status claims what the request did not take.
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
	// Shadow marks a charge that never denies the request (the settle
	// rule).
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
	// limits' buckets), and quotas deny the request only together (the
	// settle rule). 0: an ordinary charge. Ignored on a Shadow charge.
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
	// Apply settles charges at one instant of the store's clock by the
	// settle rule (see the package doc), writing decisions[i] for charges[i]; len(decisions) must
	// be len(charges). It returns an error only when the store itself
	// fails (a remote store unreachable), in which case nothing is known
	// to have been charged and decisions are undefined.
	Apply(ctx context.Context, charges []Charge, decisions []algorithms.Decision) error
}

// Settle settles a request's charges at now by the settle rule (see the
// package doc) and reports whether the request is admitted. states[i] is
// charges[i]'s bucket state on entry and, on return, the state to store
// for it; charges[i].Applied(decisions[i], admitted) says whether it
// changed. decisions[i] receives charges[i]'s decision.
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
// decided decisions deny it (the settle rule): whether it has a quota
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
