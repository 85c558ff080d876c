package engine

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// Request is one question: may this request, named by its domain and
// descriptors, go through?
type Request struct {
	// Domain selects the policy. Required.
	Domain string
	// Descriptors are charged all together or not at all. At least one.
	Descriptors []Descriptor
	// Hits is the cost charged to each descriptor without Hits of its own;
	// 0 means 1.
	Hits uint64
	// InlineNeedsDomain: a descriptor's Limit applies only when the policy
	// has Domain. In an unknown domain such a descriptor is unmatched, as
	// every other descriptor there is (Envoy's rate limit service honours a
	// descriptor's limit override only in a domain it knows). The Limit is
	// validated either way.
	InlineNeedsDomain bool
}

// Descriptor is one hierarchy of entries, most general first.
type Descriptor struct {
	Entries []config.Entry
	// Hits, when not nil, is this descriptor's cost, overriding the
	// request's. 0 is a peek: the bucket is reported, not charged.
	Hits *uint64
	// Op is what the descriptor asks of its buckets (OpCharge when zero);
	// see the package doc for how operations combine.
	Op Op
	// Overdraft is whether a charge (OpCharge) may overdraw its buckets
	// (OverdraftPolicy when zero). A check or a refund with another value
	// is invalid.
	Overdraft Overdraft
	// ChargedAt, for a refund (OpRefund), is when the units given back were
	// charged: the Status.ChargedAt of the charge's response, an instant of
	// the store's clock. The refund goes to that window (a window limit) or
	// generation (a concurrency limit), or nowhere; a bucket gets back only
	// what the charge has not drained since (algorithms.Limit.RefundAt).
	// Zero: not known; the units are given back at now
	// (algorithms.Limit.Refund). A descriptor asking anything but a refund
	// with ChargedAt set, or one before the Unix epoch, is invalid.
	ChargedAt time.Time
	// Limit, when not nil, decides this descriptor instead of the policy,
	// in any domain.
	Limit *InlineLimit
}

// Op is what a descriptor asks of its buckets. Whether a charge may go
// into debt is another question: Overdraft.
type Op uint8

const (
	// OpCharge charges the descriptor's cost: in full, into debt if need
	// be, when the descriptor's Overdraft lets it overdraw; else only if it
	// fits (all or nothing with the request's other admissions). Cost 0 is
	// a peek.
	OpCharge Op = iota
	// OpCheck asks whether a charge of 1 would be admitted now and charges
	// nothing; the cost is ignored. It denies when such a charge would be
	// denied: when the bucket is empty or in debt.
	OpCheck
	// OpRefund gives the cost back, never past the bucket's rest state. It
	// never denies.
	OpRefund
)

var opNames = [...]string{OpCharge: "charge", OpCheck: "check", OpRefund: "refund"}

// String returns "charge", "check" or "refund".
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Overdraft is whether a charge may take more than its bucket has left,
// leaving the bucket in debt.
type Overdraft uint8

const (
	// OverdraftPolicy: as the limit's policy says
	// (config.Limit.TakesOverdraft, with WithOverdraftByDefault).
	OverdraftPolicy Overdraft = iota
	// OverdraftNever: the charge is admitted only if it fits, whatever the
	// policy says (a reservation made ahead of use).
	OverdraftNever
	// OverdraftAlways: the charge is taken in full whatever is left and
	// whatever the policy says (usage that already happened).
	OverdraftAlways
)

var overdraftNames = [...]string{OverdraftPolicy: "policy", OverdraftNever: "never", OverdraftAlways: "always"}

// String returns "policy", "never" or "always".
func (o Overdraft) String() string {
	if int(o) < len(overdraftNames) {
		return overdraftNames[o]
	}
	return fmt.Sprintf("Overdraft(%d)", uint8(o))
}

// kindOf returns how a descriptor asking op, with overdraft o, at cost
// charges limit l (nil: a limit that takes no overdraft);
// overdraftByDefault is WithOverdraftByDefault. A charge of cost 0 is a
// peek (algorithms.Admit of 0); unknown ops are charges.
func kindOf(op Op, o Overdraft, cost int64, l *config.Limit, overdraftByDefault bool) algorithms.Kind {
	switch op {
	case OpCheck:
		return algorithms.Check
	case OpRefund:
		return algorithms.Refund
	}
	if cost > 0 && (o == OverdraftAlways || o == OverdraftPolicy && l != nil && l.TakesOverdraft(overdraftByDefault)) {
		return algorithms.Overdraft
	}
	return algorithms.Admit
}

// InlineLimit is a limit carried by the request itself.
type InlineLimit struct {
	Name      string
	Algorithm algorithms.Algorithm
	Requests  int64
	Period    time.Duration
	Burst     int64
}

// Response is the answer to a Request.
type Response struct {
	// Code is Allowed when every non-shadow descriptor was admitted (quotas
	// are the exception, below), else Denied (OverCapacity is reported per
	// status only). A Denied request charged no admission and applied its
	// overdraft charges and refunds all the same: the store's settle rule
	// (see package store).
	//
	// Descriptors of quota_mode rules (config.Rule.QuotaMode; not in
	// shadow mode) are quotas, the exception: they deny the request only
	// when every one of them is spent — over its limit (any of its limits
	// not Allowed) — the way Envoy AI Gateway's QuotaPolicy promises (429
	// once every related bucket is spent). When some are spent and others
	// are not, the request is admitted: the spent quotas report Denied (or
	// OverCapacity) in their statuses and are not charged (as a shadow
	// rule's denied bucket is not), the rest is charged. The store settles
	// this in the one call that settles the request (the settle rule), so
	// it is atomic. A quota whose limits are unlimited or replaced
	// has room; one that a requests_per_unit: 0 limit denies is spent. A
	// shadow_mode quota is a shadow rule: it never denies and gives the
	// other quotas no room. When every quota is spent, RetryAfter is the
	// shortest wait until one of them has room (Never when none ever will),
	// or longer if another descriptor denies too. Scopes group the quotas;
	// they name what has room and do not change the decision.
	Code algorithms.Code
	// RetryAfter, when Denied, is the longest RetryAfter of the denying
	// non-shadow statuses: after it the same request would be admitted if
	// nothing else arrived. 0 when Never.
	RetryAfter time.Duration
	// Never: a non-shadow descriptor is OverCapacity; no wait admits this
	// request.
	Never bool
	// Shadowed: the engine is in global shadow mode (WithShadowMode) and
	// admitted a request that it would otherwise have denied. Code is then
	// Allowed, RetryAfter 0 and Never false; the statuses still show which
	// descriptors would have denied it.
	Shadowed bool
	// Statuses holds one status per descriptor, in request order.
	Statuses []Status
	// Scopes are the scopes of the request's quotas (see Scope), in the
	// order of their first descriptor in the request; empty when it has
	// none. A quota's Status.Scope says which is its.
	Scopes []Scope
}

// ScopeEntries is how many of a quota descriptor's first entries name its
// scope.
const ScopeEntries = 2

// Scope is a group of a request's quotas: the quota descriptors whose
// first ScopeEntries entries (all of them, for a shorter descriptor) are
// the same, keys and values. Envoy AI Gateway's QuotaPolicy descriptors
// start with backend_name and model_name_override, so its scopes are a
// backend's models: a model's default bucket and its bucket rules are one
// scope, each backend and model of a route another. Scopes do not change
// the decision (the request is denied when every quota of every scope is
// spent); they say which still have room, for a router that fails over
// to one that does.
type Scope struct {
	// Entries name the scope: its descriptors' first entries. They are
	// the request's own (a part of its first descriptor in the scope).
	Entries []config.Entry
	// Room: a quota of the scope has room (its status is Allowed).
	Room bool
}

// Status is the decision for one descriptor.
type Status struct {
	// Code is what the deciding limit decided; for a shadow rule, what it
	// would have decided.
	Code algorithms.Code
	// Matched is false when neither a rule nor an inline limit applied:
	// the descriptor is admitted and nothing is charged.
	Matched bool
	// Rule is the policy rule that matched; nil when unmatched or inline.
	Rule *config.Rule
	// Limit is the limit that decided: the OverCapacity one, else the
	// denying one with the longest RetryAfter, else the one with the fewest
	// Remaining. nil when unmatched or when every limit of the rule was
	// replaced by another rule's.
	Limit *config.Limit
	// Remaining, ResetAfter and RetryAfter are the deciding limit's
	// (RetryAfter with its jitter added). An unlimited limit reports
	// Remaining = UnlimitedRemaining.
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	// Debt is the deciding limit's algorithms.Decision.Debt: the units its
	// bucket owes after an overdraft took it past its capacity (Remaining
	// is then 0), paid back as it refills or its windows pass; 0 when it
	// owes nothing.
	Debt int64
	// Delay is the longest queue delay among the descriptor's limits; 0
	// for a shadow rule and in global shadow mode, which only observe.
	Delay time.Duration
	// Shadow: the rule is in shadow mode and never denies the request.
	Shadow bool
	// Cost is the descriptor's cost: its own Hits when set, else the
	// request's Hits, where 0 means 1 (0 only for a peek). When the
	// response's Code is Allowed, each of the descriptor's buckets that
	// admitted it was charged Cost; otherwise no admission was charged and
	// Cost is what it asked for. An overdraft charge of Cost, or a refund
	// of Cost, was applied either way. For a check Cost is ignored. It is
	// set for unmatched descriptors too. Metrics count hits with it, as
	// Envoy's service does.
	Cost int64
	// Scope, for a quota (a descriptor of a quota_mode rule not in shadow
	// mode), is 1 + the index of its scope in Response.Scopes; 0 for any
	// other descriptor.
	Scope int
	// Kind is how the deciding limit's bucket was charged (algorithms.Admit for
	// a charge that must fit, or a peek; algorithms.Overdraft, algorithms.Check,
	// algorithms.Refund); for a descriptor without a deciding limit, what its
	// Op asks of a limit that takes no overdraft.
	Kind algorithms.Kind
	// Overdrew: a charge of the descriptor was taken in full on a limit
	// that had less left than its cost (algorithms.Overdraft decided Denied), so
	// that limit is now in debt. The usage is counted whatever Code says.
	Overdrew bool
	// ChargedAt is the instant, on the store's clock, at which the
	// descriptor's buckets were decided: a refund of this charge passes it
	// back (Descriptor.ChargedAt) to go to the same window. Zero when the
	// store does not tell its instant, or no bucket was decided.
	ChargedAt time.Time
}

// MostRestrictive returns the index of the status whose limit binds this
// request hardest, or -1 when no status has a limit that binds at all.
//
// Only statuses whose Limit is set, is not unlimited and is not a shadow
// rule's compete (unmatched and fully replaced descriptors have no Limit).
// Among them the order is the one that picks a status's deciding limit:
// over capacity before denied before admitted; among denials the longest
// RetryAfter, among admissions the fewest Remaining. On a tie the first in
// request order wins.
func (r *Response) MostRestrictive() int {
	best := -1
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Limit == nil || st.Limit.Unlimited || st.Shadow {
			continue
		}
		if best < 0 || moreRestrictive(algorithms.Decision{Code: st.Code, Remaining: st.Remaining, RetryAfter: st.RetryAfter}, &r.Statuses[best]) {
			best = i
		}
	}
	return best
}

// UnlimitedRemaining is the Remaining reported for an unlimited limit: the
// largest uint32, as Envoy's rate limit service reports.
const UnlimitedRemaining = 1<<32 - 1

// Bounds limits the size of a request. A request beyond any bound is
// rejected with an *InvalidError. Every string a request carries is
// bounded: the domain, entry keys and an inline limit's name by
// MaxKeyBytes, entry values by MaxValueBytes.
type Bounds struct {
	MaxDescriptors int // descriptors per request
	MaxEntries     int // entries per descriptor
	MaxKeyBytes    int // bytes in the domain, in each entry key and in an inline limit's name
	MaxValueBytes  int // bytes in each entry value
}

// DefaultBounds are generous for gateways and small enough that one
// request cannot make the daemon build megabytes of bucket keys.
var DefaultBounds = Bounds{
	MaxDescriptors: 64,
	MaxEntries:     16,
	MaxKeyBytes:    256,
	MaxValueBytes:  1024,
}

// Check reports a bound that is not positive: such a bound would reject
// every request.
func (b Bounds) Check() error {
	for _, f := range []struct {
		name string
		n    int
	}{
		{"max descriptors", b.MaxDescriptors},
		{"max entries", b.MaxEntries},
		{"max key bytes", b.MaxKeyBytes},
		{"max value bytes", b.MaxValueBytes},
	} {
		if f.n <= 0 {
			return fmt.Errorf("%s is %d: want at least 1", f.name, f.n)
		}
	}
	return nil
}

// InvalidError reports a malformed request: Field names the offending
// field with the API's names (e.g. "descriptors[2].entries[0].key").
type InvalidError struct {
	Field   string
	Problem string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Problem }

// RefusedError reports a well-formed request that the policy refuses
// outright, whatever the buckets hold: a descriptor asking a refund of a
// rule that takes none (config.Rule.NoRefunds). Nothing of the request is
// applied. Field names the descriptor as InvalidError's does; every API
// answers it PermissionDenied (internal/api/grpcstatus).
type RefusedError struct {
	Field   string
	Problem string
}

func (e *RefusedError) Error() string { return e.Field + ": " + e.Problem }

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// validate checks req against the bounds.
func (b *Bounds) validate(req *Request) error {
	switch {
	case req.Domain == "":
		return invalid("domain", "must not be empty")
	case len(req.Domain) > b.MaxKeyBytes:
		return invalid("domain", "is %d bytes; the limit is %d", len(req.Domain), b.MaxKeyBytes)
	case len(req.Descriptors) == 0:
		return invalid("descriptors", "at least one descriptor is required")
	case len(req.Descriptors) > b.MaxDescriptors:
		return invalid("descriptors", "%d descriptors; the limit is %d", len(req.Descriptors), b.MaxDescriptors)
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		f := b.CheckEntries(d.Entries)
		switch {
		case f.Problem == NoEntries:
			return invalid(fmt.Sprintf("descriptors[%d].entries", i), "at least one entry is required")
		case f.Problem == TooManyEntries:
			return invalid(fmt.Sprintf("descriptors[%d].entries", i), "%d entries; the limit is %d", f.Got, f.Limit)
		case !d.ChargedAt.IsZero() && d.Op != OpRefund:
			return invalid(fmt.Sprintf("descriptors[%d].charged_at", i), "is set, but the descriptor asks a %v: only a refund says when its units were charged", d.Op)
		case !d.ChargedAt.IsZero() && d.ChargedAt.UnixNano() <= 0:
			return invalid(fmt.Sprintf("descriptors[%d].charged_at", i), "is %v, before the Unix epoch: a charge time is one a response reported", d.ChargedAt.UTC())
		case d.Overdraft != OverdraftPolicy && d.Op != OpCharge:
			return invalid(fmt.Sprintf("descriptors[%d].overdraft", i), "is %v, but the descriptor asks a %v: only a charge may overdraw", d.Overdraft, d.Op)
		case d.Limit != nil && len(d.Limit.Name) > b.MaxKeyBytes:
			return invalid(fmt.Sprintf("descriptors[%d].limit.name", i), "is %d bytes; the limit is %d", len(d.Limit.Name), b.MaxKeyBytes)
		case f.Problem == EmptyKey:
			return invalid(fmt.Sprintf("descriptors[%d].entries[%d].key", i, f.Entry), "must not be empty")
		case f.Problem == LongKey:
			return invalid(fmt.Sprintf("descriptors[%d].entries[%d].key", i, f.Entry), "is %d bytes; the limit is %d", f.Got, f.Limit)
		case f.Problem == LongValue:
			return invalid(fmt.Sprintf("descriptors[%d].entries[%d].value", i, f.Entry), "is %d bytes; the limit is %d", f.Got, f.Limit)
		}
	}
	return nil
}

// EntriesProblem is what is wrong with a descriptor's entries under
// Bounds (EntriesFault).
type EntriesProblem uint8

// The problems CheckEntries finds, in the order it looks for them.
const (
	EntriesOK      EntriesProblem = iota // nothing
	NoEntries                            // no entry
	TooManyEntries                       // more than MaxEntries
	EmptyKey                             // an entry's key is empty
	LongKey                              // an entry's key is more than MaxKeyBytes
	LongValue                            // an entry's value is more than MaxValueBytes
)

// EntriesFault is the first problem CheckEntries finds. Each API names the
// fields in its own words (descriptors[i].entries[j].key, a BucketId's
// bucket map); the rule is this one.
type EntriesFault struct {
	Problem EntriesProblem
	// Entry is the index of the entry at fault (EmptyKey, LongKey,
	// LongValue); Got is how many entries (TooManyEntries) or bytes
	// (LongKey, LongValue) it has, Limit the bound it is over.
	Entry, Got, Limit int
}

// CheckEntries checks a descriptor's entries against b — the one check of
// them, for every API (the per-request APIs through the engine, a quota
// client's BucketIds): at least one entry and at most MaxEntries, then
// each entry in order, its key not empty and at most MaxKeyBytes, then its
// value at most MaxValueBytes. It returns the first problem found, or a
// fault whose Problem is EntriesOK.
func (b *Bounds) CheckEntries(entries []config.Entry) EntriesFault {
	switch {
	case len(entries) == 0:
		return EntriesFault{Problem: NoEntries}
	case len(entries) > b.MaxEntries:
		return EntriesFault{Problem: TooManyEntries, Got: len(entries), Limit: b.MaxEntries}
	}
	for j, e := range entries {
		switch {
		case e.Key == "":
			return EntriesFault{Problem: EmptyKey, Entry: j}
		case len(e.Key) > b.MaxKeyBytes:
			return EntriesFault{Problem: LongKey, Entry: j, Got: len(e.Key), Limit: b.MaxKeyBytes}
		case len(e.Value) > b.MaxValueBytes:
			return EntriesFault{Problem: LongValue, Entry: j, Got: len(e.Value), Limit: b.MaxValueBytes}
		}
	}
	return EntriesFault{}
}
