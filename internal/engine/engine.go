// Package engine answers rate-limit requests: it matches each descriptor
// against the policy, charges every matching bucket through the store — all
// of them or none — and builds one status per descriptor.
//
// Both APIs (ratelimit.v1 and Envoy's v3) translate into a Request and out
// of a Response; every semantic decision is made here once.
//
// # Operations and how they combine
//
// Each descriptor asks one operation (Descriptor.Op) of each of its
// limits' buckets, and each becomes one store.Charge of an algorithms.Kind:
//
//   - OpCharge of Cost > 0: when the descriptor may overdraw
//     (Descriptor.Overdraft: OverdraftAlways, or OverdraftPolicy on a limit
//     that takes overdraft, config.Limit.TakesOverdraft with the engine's
//     WithOverdraftByDefault) an overdraft charge (algorithms.Overdraft):
//     taken in full whatever is left, the bucket going into debt if need be
//     (Status.Overdrew); otherwise an admission (algorithms.Admit), taken
//     only if it fits. Cost 0 is a peek: reported, not charged.
//   - OpCheck: would a charge of 1 be admitted now (algorithms.Check)?
//     Nothing is charged; a check denies exactly when such a charge would
//     be denied, a bucket in debt included.
//   - OpRefund: Cost units given back (algorithms.Refund), never past the
//     bucket's rest state (a full bucket, an empty window). A request in
//     which a descriptor asks a refund of a rule that takes none
//     (refunds: false, config.Rule.NoRefunds) is refused as a whole with a
//     *RefusedError, whatever the cost, and nothing of it is applied: a
//     caller that may charge a limit and give the charge back could
//     otherwise charge it without end.
//
// One request's charges combine by the store's settle rule (see package
// store: all or nothing, overdraft charges and refunds always, what a
// denied request reports). The engine makes a shadow_mode rule's charges
// (and, in global shadow mode, every charge) shadow charges — shadow mode
// means "never hold a request back", not "do not count" — and the charges
// of a quota_mode rule one quota's (see Response.Code); a request denied
// outright by a requests_per_unit: 0 limit applies no admission either.
//
// Descriptors of one request that name the same bucket (two QuotaPolicies
// on one backend and model make Envoy send one descriptor twice) are
// decided as envoyproxy/ratelimit decides them, on the running total: each
// as if the bucket had been charged the costs of the descriptors up to and
// including it, in request order (upstream pipelines one INCRBY per
// descriptor). The bucket is charged their summed cost, by the settle
// rule. Quotas are the
// exception: descriptors that name one bucket match one rule, and when it
// is a quota_mode rule their charge is one quota's, which the store's rule
// admits or spends whole — they are decided together on their summed cost
// (upstream lets the first through while it has room). They must ask the
// same operation of the bucket (both charges, both refunds, …); a request
// in which they ask different ones is invalid.
package engine

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// Engine decides requests against the current policy. It is safe for
// concurrent use.
type Engine struct {
	policy             atomic.Pointer[config.Policy]
	store              store.Store
	bounds             Bounds
	jitter             func(max time.Duration) time.Duration
	shadow             bool     // WithShadowMode
	overdraftByDefault bool     // WithOverdraftByDefault
	counterKeys        bool     // WithCounterKeys
	observer           Observer // WithObserver; nil for none
}

// Option configures an Engine.
type Option func(*Engine)

// WithBounds sets the request size bounds (default DefaultBounds).
func WithBounds(b Bounds) Option { return func(e *Engine) { e.bounds = b } }

// WithJitter replaces the source of retry jitter: f(max) must return a
// duration in [0, max]. The default draws uniformly.
func WithJitter(f func(max time.Duration) time.Duration) Option {
	return func(e *Engine) { e.jitter = f }
}

// WithShadowMode sets global shadow mode (off by default), as
// envoyproxy/ratelimit's SHADOW_MODE: every limit is charged as a
// shadow_mode rule's is — a bucket that admits its charge is charged, one
// that denies it is not — and a request that would have been denied is
// admitted: Response.Code is Allowed and Response.Shadowed is true. Statuses
// are unchanged: each still says what its limit decided.
func WithShadowMode(on bool) Option { return func(e *Engine) { e.shadow = on } }

// WithOverdraftByDefault makes every limit whose policy does not say
// overdraft: (config.OverdraftDefault), inline limits included, take
// overdraft charges (off by default): see config.Limit.TakesOverdraft.
// Upstream counts every charge in full unless its
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is set; policies that arrive
// without ratelimitd's extensions (as over xDS) need this to keep token
// budgets.
func WithOverdraftByDefault(on bool) Option {
	return func(e *Engine) { e.overdraftByDefault = on }
}

// OverdraftByDefault reports WithOverdraftByDefault: whether limits whose
// policy does not say overdraft: take overdraft charges.
func (e *Engine) OverdraftByDefault() bool { return e.overdraftByDefault }

// WithCounterKeys gives the charges of fixed-window limits a
// store.Charge.Counter (off by default): envoyproxy/ratelimit's name for
// the bucket, "<domain>_<key>_<value>_…_" (at a share_threshold depth the
// wildcard pattern for the value, as upstream names it), which a store
// that keeps such counters (the Redis store's Config.Counters) keeps the
// bucket under. Only where the name is the bucket's alone, as upstream's
// is: a limit of a rule whose other limits are not fixed windows (upstream
// names every period's counter alike), or a limit the request carries;
// and in one request, only the first charge of a name.
func WithCounterKeys(on bool) Option { return func(e *Engine) { e.counterKeys = on } }

// Observer is told about each request the engine decides. It is called
// once per call of ShouldRateLimit that returns nil, after resp is
// complete and before ShouldRateLimit returns, on the caller's goroutine:
// it adds to every decision's latency, so it should be quick, and it must
// not modify req or resp nor keep them, or anything they point to except
// the policy's *config.Rule and *config.Limit values, after it returns.
// ctx is the call's, for what belongs to the call rather than to the
// daemon (its trace span, say). took is the real time the decision took,
// from the start of ShouldRateLimit to the end of building resp
// (validation, matching, the store and the response); it is measured only
// when an Observer is set. Requests rejected as invalid and store failures
// are not observed.
type Observer func(ctx context.Context, req *Request, resp *Response, took time.Duration)

// epoch anchors sinceEpoch.
var epoch = time.Now()

// sinceEpoch reads the monotonic clock alone: half the cost of time.Now,
// which reads the wall clock too.
func sinceEpoch() time.Duration { return time.Since(epoch) }

// WithObserver sets the engine's observer (none by default), the hook that
// metrics use so that they count what the engine decided rather than
// decide anything again.
func WithObserver(o Observer) Option { return func(e *Engine) { e.observer = o } }

// New returns an engine deciding with policy p and keeping buckets in s.
func New(p *config.Policy, s store.Store, opts ...Option) *Engine {
	e := &Engine{store: s, bounds: DefaultBounds, jitter: uniformJitter}
	e.policy.Store(p)
	for _, opt := range opts {
		opt(e)
	}
	return e
}

func uniformJitter(max time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(max) + 1))
}

// Policy returns the policy in force.
func (e *Engine) Policy() *config.Policy { return e.policy.Load() }

// SetPolicy replaces the policy for requests that start after it returns.
// A bucket whose limit keeps its config.Limit.Bucket (the same rule, kind
// of state and period) keeps its state, read by the changed limit as
// internal/core/algorithms says ("A changed limit"): what was used stays used.
func (e *Engine) SetPolicy(p *config.Policy) { e.policy.Store(p) }

// ShouldRateLimit decides req and writes the answer into resp, reusing
// resp.Statuses' and resp.Scopes' storage. It returns an *InvalidError for
// a malformed request, a *RefusedError for a refund of a rule that takes
// none (nothing applied), or the store's error if the store failed (then
// nothing is known to have been charged). A request is settled in one call
// of the store (one Redis round trip), quotas included.
func (e *Engine) ShouldRateLimit(ctx context.Context, req *Request, resp *Response) error {
	var start time.Duration
	if e.observer != nil {
		start = sinceEpoch()
	}
	if err := e.bounds.validate(req); err != nil {
		return err
	}
	w := workPool.Get().(*work)
	defer w.release()

	w.counterKeys = e.counterKeys
	if err := w.plan(e.policy.Load(), req, e.shadow, e.overdraftByDefault); err != nil {
		return err
	}
	if len(w.charges) > 0 {
		if err := e.store.Apply(ctx, w.charges, w.decisions); err != nil {
			return err
		}
	}
	e.respond(w, req, resp)
	if e.observer != nil {
		e.observer(ctx, req, resp, sinceEpoch()-start)
	}
	return nil
}

// work is one request's scratch space, pooled so that a decision does not
// allocate.
type work struct {
	keys    []byte // every charge's bucket key, back to back
	keyEnds []int  // keys[keyEnds[i-1]:keyEnds[i]] is charge i's key
	// With WithCounterKeys (counterKeys), counters holds the charges'
	// store.Charge.Counter back to back, as keys does: empty for a charge
	// without one.
	counterKeys bool
	counters    []byte
	counterEnds []int
	charges     []store.Charge // one per distinct bucket
	decisions   []algorithms.Decision
	uses        []use          // one per (descriptor, limit) pair
	rules       []*config.Rule // per descriptor; nil when unmatched
	roles       []role         // per descriptor
	limits      [][]*config.Limit
	replaced    map[string]bool // names replaced by a matched limit

	repeats bool    // two uses name one bucket (see probeRepeats)
	running []int64 // probeRepeats' running costs, per charge
	lastUse []int   // probeRepeats' last use, per charge

	// Quotas (see Response.Code): the descriptors in a quota_mode rule
	// that is not in shadow mode; those of them a requests_per_unit: 0
	// limit denies outright; whether one has room without a bucket (its
	// limits unlimited or replaced), so that the quotas cannot deny.
	quotas, quotasOutright int
	quotaOpen              bool
}

// role is how a descriptor's decision counts toward its request's,
// decided once, in plan, from its rule.
type role uint8

const (
	// ordinary: the descriptor denies the request when one of its limits
	// denies it (an unmatched or inline descriptor is ordinary too).
	ordinary role = iota
	// shadow: a shadow_mode rule, which never denies the request.
	shadow
	// quota: a quota_mode rule, which denies the request only together
	// with every other quota of it (see Response.Code).
	quota
)

func roleOf(r *config.Rule) role {
	switch {
	case r == nil:
		return ordinary
	case r.ShadowMode:
		return shadow
	case r.QuotaMode:
		return quota
	}
	return ordinary
}

// use ties a descriptor's limit to the charge that decides it.
type use struct {
	descriptor int
	limit      *config.Limit
	cost       int64
	kind       algorithms.Kind // how the limit's bucket is charged
	replaced   bool            // another matched limit replaces this one
	charge     int             // index in charges; -1 when nothing is charged
	probe      int             // index in charges of the probe that decides it; -1 for none (probeRepeats)
}

// decision returns what decided u: its probe's decision, or its charge's.
func (w *work) decision(u *use) algorithms.Decision {
	if u.probe >= 0 {
		return w.decisions[u.probe]
	}
	return w.decisions[u.charge]
}

// deniedOutright reports whether u is a requests_per_unit: 0 limit that
// denies its descriptor without a bucket: anything but a refund or a peek.
func (u *use) deniedOutright() bool {
	return !u.replaced && u.limit.DenyAll && (u.kind == algorithms.Check || u.kind != algorithms.Refund && u.cost > 0)
}

var workPool = sync.Pool{New: func() any { return new(work) }}

func (w *work) release() {
	clear(w.rules)
	clear(w.limits)
	clear(w.replaced)
	for i := range w.charges {
		w.charges[i] = store.Charge{}
	}
	for i := range w.uses {
		w.uses[i].limit = nil
	}
	w.keys, w.keyEnds = w.keys[:0], w.keyEnds[:0]
	w.counters, w.counterEnds = w.counters[:0], w.counterEnds[:0]
	w.charges, w.decisions, w.uses = w.charges[:0], w.decisions[:0], w.uses[:0]
	w.rules, w.roles, w.limits = w.rules[:0], w.roles[:0], w.limits[:0]
	w.quotas, w.quotasOutright, w.quotaOpen = 0, 0, false
	w.repeats = false
	workPool.Put(w)
}

// plan matches every descriptor, decides its role and the kind of each
// of its charges, and lists the buckets to charge; with shadowAll, every
// charge is a shadow charge (global shadow mode); overdraftByDefault is
// WithOverdraftByDefault.
func (w *work) plan(p *config.Policy, req *Request, shadowAll, overdraftByDefault bool) error {
	if err := w.match(p.Domain(req.Domain), req); err != nil {
		return err
	}
	denied := false
	for i := range req.Descriptors {
		if j := w.sameQuota(req, i); j >= 0 {
			w.repeatUses(j, i)
			continue
		}
		outright, err := w.useLimits(req, i, shadowAll, overdraftByDefault)
		if err != nil {
			return err
		}
		denied = denied || outright
	}
	if w.quotas > 0 && w.quotasOutright == w.quotas {
		denied = true // no quota can admit the request
	}
	if w.quotaOpen {
		w.unquota(-1) // the quotas cannot deny the request
	}
	w.finishCharges(denied)
	w.decisions = slices.Grow(w.decisions[:0], len(w.charges))[:len(w.charges)]
	return nil
}

// match finds each descriptor's rule (in dom, nil when the policy has no
// such domain) and limits, decides its role, and notes the limit names
// the matched limits replace.
func (w *work) match(dom *config.Domain, req *Request) error {
	for i := range req.Descriptors {
		rule, limits, err := matchDescriptor(dom, req, i)
		if err != nil {
			return err
		}
		w.rules = append(w.rules, rule)
		w.roles = append(w.roles, roleOf(rule))
		w.limits = append(w.limits, limits)
		for _, l := range limits {
			for _, name := range l.Replaces {
				if w.replaced == nil {
					w.replaced = make(map[string]bool)
				}
				w.replaced[name] = true
			}
		}
	}
	return nil
}

// matchDescriptor returns descriptor i's rule in dom and its limits: the
// limit it carries (none when the policy has no such domain and
// req.InlineNeedsDomain), or its rule's. A refund of a rule that takes no
// refunds is refused.
func matchDescriptor(dom *config.Domain, req *Request, i int) (*config.Rule, []*config.Limit, error) {
	d := &req.Descriptors[i]
	if d.Limit != nil {
		l, err := config.NewInlineLimit(d.Limit.Name, d.Limit.Algorithm, d.Limit.Requests, d.Limit.Period, d.Limit.Burst)
		if err != nil {
			return nil, nil, invalid(fmt.Sprintf("descriptors[%d].limit", i), "%v", err)
		}
		if dom == nil && req.InlineNeedsDomain {
			return nil, nil, nil
		}
		return nil, []*config.Limit{l}, nil
	}
	if dom == nil {
		return nil, nil, nil
	}
	rule := dom.Match(d.Entries)
	if rule == nil {
		return nil, nil, nil
	}
	if rule.NoRefunds && d.Op == OpRefund {
		return nil, nil, &RefusedError{Field: fmt.Sprintf("descriptors[%d]", i), Problem: fmt.Sprintf("asks a refund of rule %s, which takes no refunds (refunds: false in its policy)", rule.StatKey)}
	}
	return rule, rule.Limits, nil
}

// useLimits adds a use of each of descriptor i's limits and the charges
// they need, and reports whether a requests_per_unit: 0 limit denies the
// request outright. A quota's descriptor counts in w.quotas; one denied
// outright is spent (w.quotasOutright), one with room without a bucket
// opens them all (w.quotaOpen).
func (w *work) useLimits(req *Request, i int, shadowAll, overdraftByDefault bool) (denied bool, err error) {
	d := &req.Descriptors[i]
	cost := costOf(req, d)
	r := w.roles[i]
	shadowCharge := shadowAll || r == shadow
	// Each quota is a store quota of its own (store.Charge.Quota),
	// numbered by its descriptor.
	var quotaID uint32
	if r == quota && !shadowAll {
		quotaID = uint32(i) + 1
	}
	outright, charged := false, false
	for _, l := range w.limits[i] {
		u := use{descriptor: i, limit: l, cost: cost, kind: kindOf(d.Op, d.Overdraft, cost, l, overdraftByDefault), charge: -1, probe: -1}
		u.replaced = l.Name != "" && w.replaced[l.Name]
		if u.deniedOutright() && !shadowCharge {
			if quotaID != 0 {
				outright = true
			} else {
				denied = true
			}
		}
		if !u.replaced && !l.Unlimited && !l.DenyAll {
			c, err := w.charge(req.Domain, d.Entries, w.rules[i], &u, shadowCharge, quotaID)
			if err != nil {
				return false, err
			}
			u.charge, charged = c, true
		}
		w.uses = append(w.uses, u)
	}
	if r == quota {
		w.quotas++
	}
	if quotaID != 0 {
		switch {
		case outright:
			w.quotasOutright++
			w.unquota(i) // spent whatever its buckets say
		case !charged:
			w.quotaOpen = true // room without a bucket
		}
	}
	return denied, nil
}

// finishCharges sets the charges' keys, final only now (appending may
// have moved w.keys), their counters, and the probes of buckets named
// twice. When a deny-all limit denies the request outright (denied), the
// request admits nothing: its other admissions are only peeked, for their
// statuses (overdraft charges and refunds are applied all the same).
func (w *work) finishCharges(denied bool) {
	start := 0
	for i := range w.charges {
		w.charges[i].Key = w.keys[start:w.keyEnds[i]]
		start = w.keyEnds[i]
		if denied && w.charges[i].Kind == algorithms.Admit {
			w.charges[i].Cost = 0
		}
	}
	if w.counterKeys {
		w.setCounters()
	}
	if w.repeats {
		w.probeRepeats()
	}
}

// probeRepeats decides each descriptor that names a bucket a later
// descriptor of the request names again on the running total, as
// envoyproxy/ratelimit's INCRBY per descriptor decides it: for each use of
// such a bucket but its last, a probe (store.Charge.Probe, shadow) charges
// the bucket the costs of the uses up to it, in request order, and decides
// the use; the last use is decided by the bucket's charge, of every use's
// cost. A check needs none: it charges nothing, so every check of a bucket
// sees the same. Nor does a bucket that only quotas name (a quota's
// charge): the store's quota rule admits or spends a charge whole, so
// such descriptors are decided together on their summed cost (see the
// package doc).
func (w *work) probeRepeats() {
	n := len(w.charges)
	w.running, w.lastUse = slices.Grow(w.running[:0], n)[:n], slices.Grow(w.lastUse[:0], n)[:n]
	clear(w.running)
	for i := range w.uses {
		if c := w.uses[i].charge; c >= 0 {
			w.lastUse[c] = i
		}
	}
	for i := range w.uses {
		u := &w.uses[i]
		if u.charge < 0 {
			continue
		}
		total := addCost(w.running[u.charge], u.cost)
		w.running[u.charge] = total
		c := w.charges[u.charge]
		if i == w.lastUse[u.charge] || c.Kind == algorithms.Check || c.Quota != 0 {
			continue
		}
		if c.Cost != 0 { // not a request denied outright (its admits are peeks)
			c.Cost = total
		}
		c.Shadow, c.Probe = true, true
		w.charges = append(w.charges, c)
		u.probe = len(w.charges) - 1
	}
}

// sameQuota returns the earlier descriptor of req that descriptor i names
// again as a quota — the same quota_mode rule, entries, operation and
// cost — or -1. Such a quota counts once: Envoy AI Gateway sends one
// descriptor twice for two QuotaPolicies on one backend and model, and
// promises that the first policy alone applies (see docs/envoy.md, "The
// same bucket named twice"). Any other bucket named twice is decided on
// the running total, as upstream decides it (probeRepeats).
func (w *work) sameQuota(req *Request, i int) int {
	if w.roles[i] != quota || w.rules[i] == nil {
		return -1
	}
	d := &req.Descriptors[i]
	for j := range i {
		e := &req.Descriptors[j]
		if w.roles[j] == quota && w.rules[j] == w.rules[i] && e.Op == d.Op && e.Overdraft == d.Overdraft &&
			costOf(req, e) == costOf(req, d) && slices.Equal(e.Entries, d.Entries) {
			return j
		}
	}
	return -1
}

// repeatUses gives descriptor i the uses of descriptor j, whose quota it
// names again: the same charges and decisions, charged once.
func (w *work) repeatUses(j, i int) {
	for _, u := range w.uses {
		if u.descriptor == j {
			u.descriptor = i
			w.uses = append(w.uses, u)
		}
	}
}

// unquota makes the charges of descriptor i's quota (every quota's, for
// i < 0) shadow charges, which deny nothing and give the other quotas no
// room: a quota that a requests_per_unit: 0 limit denies outright is spent
// whatever its buckets say, and when one quota has room without a bucket
// the quotas cannot deny the request. As any quota's, their Admits are
// charged if the request is admitted and they fit.
func (w *work) unquota(i int) {
	for j := range w.charges {
		c := &w.charges[j]
		if c.Quota != 0 && (i < 0 || c.Quota == uint32(i)+1) {
			c.Quota, c.Shadow = 0, true
		}
	}
}

// addCost returns a + b for costs a, b ≥ 0, at most math.MaxInt64.
func addCost(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// costOf resolves a descriptor's cost (see Cost).
func costOf(req *Request, d *Descriptor) int64 { return Cost(req.Hits, d.Hits) }

// Cost is the rule every API's cost follows: a descriptor's cost is its
// own hits when set (descriptorHits not nil; 0 is a peek), else the
// request's hits, where 0 means 1. Costs above math.MaxInt64 are
// math.MaxInt64. A request charges nothing — it is a peek — exactly when
// every descriptor's cost is 0.
func Cost(requestHits uint64, descriptorHits *uint64) int64 {
	hits := requestHits
	if hits == 0 {
		hits = 1
	}
	if descriptorHits != nil {
		hits = *descriptorHits
	}
	if hits > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(hits)
}

// charge adds u's charge on the bucket of (domain, entries, u.limit) and
// returns its index; rule is the rule matched (nil for an inline limit),
// quota the charge's store.Charge.Quota. Two descriptors naming the same
// bucket share one charge of their summed cost, so the store charges each
// bucket once (probeRepeats decides each on the running total); when they
// ask different kinds of charge of it, the request is invalid. A shared
// charge is a quota's only if both descriptors are quotas (then the
// first's): an ordinary descriptor's denial denies.
func (w *work) charge(domain string, entries []config.Entry, rule *config.Rule, u *use, shadow bool, quota uint32) (int, error) {
	start := 0
	if n := len(w.keyEnds); n > 0 {
		start = w.keyEnds[n-1]
	}
	var shared []string
	if rule != nil {
		shared = rule.Shared
	}
	w.keys = AppendBucketKey(w.keys, domain, entries, shared, u.limit.Bucket)
	key := w.keys[start:]
	prev := 0
	for i, end := range w.keyEnds {
		if bytes.Equal(w.keys[prev:end], key) {
			w.keys = w.keys[:start]
			w.repeats = true
			c := &w.charges[i]
			if c.Kind != u.kind {
				return 0, w.conflict(i, u)
			}
			c.Cost = addCost(c.Cost, u.cost)
			if quota == 0 && !shadow {
				c.Quota = 0
			}
			return i, nil
		}
		prev = end
	}
	w.keyEnds = append(w.keyEnds, len(w.keys))
	w.charges = append(w.charges, store.Charge{Domain: domain, Limit: &u.limit.Rate, Cost: u.cost, Kind: u.kind, Shadow: shadow, Quota: quota})
	if w.counterKeys {
		if counterLimit(rule, u.limit) {
			w.counters = appendCounter(w.counters, domain, entries, shared)
		}
		w.counterEnds = append(w.counterEnds, len(w.counters))
	}
	return len(w.charges) - 1, nil
}

// counterLimit reports whether a charge of limit l of rule (nil for a
// limit the request carries) has a store.Charge.Counter (WithCounterKeys):
// whether l is a fixed window and no other limit of rule is.
func counterLimit(rule *config.Rule, l *config.Limit) bool {
	if l.Rate.Algorithm() != algorithms.FixedWindow {
		return false
	}
	if rule != nil {
		for _, o := range rule.Limits {
			if o != l && o.Bucket != "" && o.Rate.Algorithm() == algorithms.FixedWindow {
				return false
			}
		}
	}
	return true
}

// appendCounter appends envoyproxy/ratelimit's name of the bucket that
// entries charge in domain, before its window: the domain, then each
// entry's key and value (at a depth where shared holds a pattern, the
// pattern), each followed by "_".
func appendCounter(b []byte, domain string, entries []config.Entry, shared []string) []byte {
	b = append(append(b, domain...), '_')
	for i, e := range entries {
		b = append(append(b, e.Key...), '_')
		if i < len(shared) && shared[i] != "" {
			b = append(b, shared[i]...)
		} else {
			b = append(b, e.Value...)
		}
		b = append(b, '_')
	}
	return b
}

// setCounters sets the charges' store.Charge.Counter from w.counters, once
// they are final: each charge's, but a name that an earlier charge of the
// request has (two limits' charges, of a rule and of the request, on one
// descriptor), which is left to the store's own key.
func (w *work) setCounters() {
	start := 0
	for i, end := range w.counterEnds {
		c := w.counters[start:end]
		start = end
		if len(c) == 0 {
			continue
		}
		repeated := false
		for j := range i {
			if bytes.Equal(w.charges[j].Counter, c) {
				repeated = true
				break
			}
		}
		if !repeated {
			w.charges[i].Counter = c
		}
	}
}

// conflict reports u, whose bucket charge i already charges with another
// kind of charge.
func (w *work) conflict(i int, u *use) error {
	first := 0
	for _, v := range w.uses {
		if v.charge == i {
			first = v.descriptor
			break
		}
	}
	return invalid(fmt.Sprintf("descriptors[%d]", u.descriptor), "asks %v of the bucket that descriptors[%d] asks %v of; one request asks one operation of a bucket",
		u.kind, first, w.charges[i].Kind)
}

// respond builds resp from the decisions.
func (e *Engine) respond(w *work, req *Request, resp *Response) {
	resp.Code, resp.RetryAfter, resp.Never, resp.Shadowed = algorithms.Allowed, 0, false, false
	resp.Statuses, resp.Scopes = resp.Statuses[:0], resp.Scopes[:0]
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		cost := costOf(req, d)
		resp.Statuses = append(resp.Statuses, Status{
			Cost:    cost,
			Kind:    kindOf(d.Op, d.Overdraft, cost, nil, false),
			Matched: w.limits[i] != nil,
			Rule:    w.rules[i],
			Shadow:  w.roles[i] == shadow,
		})
	}
	for i := range w.uses {
		e.applyUse(w, &w.uses[i], &resp.Statuses[w.uses[i].descriptor])
	}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Shadow || w.roles[i] == quota || st.Code == algorithms.Allowed {
			continue
		}
		resp.Code = algorithms.Denied
		if st.Code == algorithms.OverCapacity {
			resp.Never = true
		}
		resp.RetryAfter = max(resp.RetryAfter, st.RetryAfter)
	}
	if w.quotas > 0 {
		e.respondQuotas(w, req, resp)
	}
	if resp.Never {
		resp.RetryAfter = 0
	}
	if e.shadow && resp.Code != algorithms.Allowed {
		resp.Code, resp.RetryAfter, resp.Never, resp.Shadowed = algorithms.Allowed, 0, false, true
	}
}

// applyUse sets st, its descriptor's status, to u's decision when it is
// the first or the most restrictive of the descriptor's limits, and adds
// its delay; a replaced limit decides nothing.
func (e *Engine) applyUse(w *work, u *use, st *Status) {
	var d algorithms.Decision
	switch {
	case u.replaced:
		return
	case u.limit.Unlimited:
		d = algorithms.Decision{Remaining: UnlimitedRemaining}
	case u.limit.DenyAll:
		if u.deniedOutright() {
			d.Code = algorithms.OverCapacity
		}
	default:
		d = w.decision(u)
		if u.kind == algorithms.Overdraft && d.Code == algorithms.Denied {
			st.Overdrew = true // taken in full into debt (see Status.Overdrew)
		}
		if d.Code == algorithms.Denied && u.limit.RetryJitter > 0 {
			d.RetryAfter = min(d.RetryAfter, math.MaxInt64-u.limit.RetryJitter) + e.jitter(u.limit.RetryJitter)
		}
	}
	if st.Limit == nil || moreRestrictive(d, st) {
		st.Code, st.Limit, st.Kind = d.Code, u.limit, u.kind
		st.Remaining, st.ResetAfter, st.RetryAfter = d.Remaining, d.ResetAfter, d.RetryAfter
	}
	if !st.Shadow && !e.shadow { // a shadow rule observes; it never holds a request back
		st.Delay = max(st.Delay, d.Delay)
	}
}

// respondQuotas decides the request's quotas by the store's rule
// (store.QuotasDeny over the decisions the store reported, so that the
// answer is the one the store settled) and names their scopes.
func (e *Engine) respondQuotas(w *work, req *Request, resp *Response) {
	spent := w.quotasOutright == w.quotas || store.QuotasDeny(w.charges, w.decisions)
	if e.shadow {
		// Every charge was a shadow charge: whether the quotas would
		// have denied, for Response.Shadowed, is read from the statuses.
		spent = true
		for i := range resp.Statuses {
			if w.roles[i] == quota && resp.Statuses[i].Code == algorithms.Allowed {
				spent = false
			}
		}
	}
	if spent {
		// Every quota is spent: retry when the first has room again.
		var retry time.Duration
		over, never := 0, 0
		for i := range resp.Statuses {
			st := &resp.Statuses[i]
			if w.roles[i] != quota || st.Shadow {
				continue
			}
			switch st.Code {
			case algorithms.OverCapacity:
				never++
			case algorithms.Denied:
				if over == 0 || st.RetryAfter < retry {
					retry = st.RetryAfter
				}
				over++
			}
		}
		resp.Code = algorithms.Denied
		if over == 0 && never > 0 {
			resp.Never = true
		}
		resp.RetryAfter = max(resp.RetryAfter, retry)
	}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if w.roles[i] != quota {
			continue
		}
		entries := req.Descriptors[i].Entries
		entries = entries[:min(len(entries), ScopeEntries)]
		g := slices.IndexFunc(resp.Scopes, func(s Scope) bool { return slices.Equal(s.Entries, entries) })
		if g < 0 {
			resp.Scopes = append(resp.Scopes, Scope{Entries: entries})
			g = len(resp.Scopes) - 1
		}
		st.Scope = g + 1
		if st.Code == algorithms.Allowed {
			resp.Scopes[g].Room = true
		}
	}
}

// moreRestrictive reports whether decision d binds harder than the one
// status st holds: over capacity beats denied beats allowed; among denials
// the longer retry wins, among admissions the fewer remaining.
func moreRestrictive(d algorithms.Decision, st *Status) bool {
	if rank(d.Code) != rank(st.Code) {
		return rank(d.Code) > rank(st.Code)
	}
	if d.Code == algorithms.Denied {
		return d.RetryAfter > st.RetryAfter
	}
	return d.Remaining < st.Remaining
}

func rank(c algorithms.Code) int {
	switch c {
	case algorithms.OverCapacity:
		return 2
	case algorithms.Denied:
		return 1
	}
	return 0
}
