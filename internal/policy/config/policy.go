package config

import (
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key, Value string
}

// Policy is a validated set of domains. It is immutable once built and safe
// for concurrent use.
type Policy struct {
	domains map[string]*Domain
	sorted  []*Domain // by Name
}

// Domain is the rule tree of one domain.
type Domain struct {
	// Name is the domain as requests name it.
	Name string
	// Source is where the domain was loaded from: a file path, or
	// "embedded:default.yaml" for the embedded default policy.
	Source string
	// QuotaFallback (quota_fallback) is what a quota client of the domain
	// does before a bucket's first assignment and once one has expired.
	QuotaFallback QuotaFallback

	root node // the top-level descriptors
	line int  // of the domain field, for a duplicate domain
}

// Rule is what a descriptor matched: one node of a domain's tree that
// carries limits. A Rule and its Limits belong to their Policy and are
// shared by every request that matches them: they must not be modified.
type Rule struct {
	// StatKey names the rule for metrics the way envoyproxy/ratelimit
	// does: the domain, then each level's key, or key_value when the policy
	// gave a value (wildcard patterns as written), joined by dots.
	StatKey string
	// Limits holds the rule's limits: one from rate_limit, or several from
	// rate_limits. Never empty.
	Limits []*Limit
	// ShadowMode: the rule's limits are charged and reported but never deny.
	ShadowMode bool
	// QuotaMode (quota_mode): the rule is one of a request's quotas. A
	// request is denied by its quota rules only when every one of them is
	// over its limit; one with room is enough (see the engine).
	QuotaMode bool
	// Shared, when not nil, has one element per entry of the descriptors
	// the rule matches: the wildcard value, as written (ending in *), of a
	// share_threshold descriptor at that depth, or "" where the request's
	// own value names the bucket. Every value a share_threshold wildcard
	// matches counts in one bucket (per values of the other entries),
	// rather than one bucket per value.
	Shared []string
	// DetailedMetric: metrics for this rule may carry the request's values.
	DetailedMetric bool
	// Metadata is the descriptor's metadata: nil, or a non-empty object,
	// shared and never modified. It changes no decision; the APIs send it
	// back (the Envoy adapter in dynamic_metadata, as upstream does when
	// the descriptor passed).
	Metadata *structpb.Struct
	// NoRefunds (refunds: false): the rule takes no refunds. The engine
	// refuses a request in which a descriptor matching the rule asks a
	// refund, whatever its cost, and applies nothing of it. The zero value
	// takes refunds, as every rule did before the field existed.
	NoRefunds bool
}

// Limit is one limit of a rule, or an inline limit (NewInlineLimit).
type Limit struct {
	// Name is rate_limit.name; may be empty.
	Name string
	// Unlimited: the limit always admits and keeps no bucket.
	Unlimited bool
	// DenyAll: requests_per_unit is 0, which envoyproxy/ratelimit reads as
	// "deny every request". Every charge is over capacity (no wait admits
	// it), a peek reports 0 remaining; the limit keeps no bucket.
	DenyAll bool
	// Replaces names other limits that this one replaces when both match
	// the same request.
	Replaces []string
	// Rate is the decision arithmetic. Zero when Unlimited or DenyAll.
	Rate algorithms.Limit
	// Unit and UnitMultiplier are the period as the policy wrote it:
	// Period = UnitMultiplier × Unit's length. An inline limit given as a
	// duration has Unit = UnitNone and UnitMultiplier = 0.
	Unit           Unit
	UnitMultiplier int64
	// RetryJitter is the most that may be added at random to a denial's
	// retry_after. 0 for none.
	RetryJitter time.Duration
	// Overdraft is rate_limit.overdraft: whether a charge is taken in full
	// whatever is left, leaving the bucket in debt (see TakesOverdraft).
	// It does not change the bucket's arithmetic, so it is not part of Key:
	// turning it on or off keeps the buckets and their debt.
	Overdraft Overdraft
	// Key identifies the limit's arithmetic (algorithm, requests, period,
	// burst): limits with equal Keys decide alike. Never empty.
	Key string
	// Bucket names the limit's buckets in bucket keys (internal/engine):
	// the kind of state its algorithm keeps and its period, as in
	// "bucket/1h0m0s" (see BucketName), and "#2", "#3", … after the
	// second and later limits of one rule with the same name, in the
	// order the rule lists them. A reload that changes a limit's requests
	// or burst, or moves it among token_bucket, leaky_bucket and
	// leaky_bucket_queue, keeps its Bucket, and so its buckets and what
	// they hold (internal/core/algorithms reads a state under a changed
	// limit); one that changes its period, or moves it between a window
	// and a bucket algorithm or between the two windows, starts new
	// buckets. Empty for limits that keep no bucket (unlimited, deny-all).
	Bucket string
}

// Overdraft is a limit's rate_limit.overdraft.
type Overdraft uint8

const (
	// OverdraftDefault: the policy does not say; the daemon's default
	// decides (--overdraft-by-default, off unless set).
	OverdraftDefault Overdraft = iota
	// OverdraftOff: overdraft: false.
	OverdraftOff
	// OverdraftOn: overdraft: true.
	OverdraftOn
)

// TakesOverdraft reports whether a charge to l is an overdraft charge:
// taken in full whatever is left, the bucket going into debt, rather than
// admitted only when it fits. byDefault is the answer for a limit whose
// policy does not say, but for a concurrency, whose charges are places
// taken before a request runs, not usage known after it: it takes
// overdraft only when its policy says so. Unlimited and deny-all limits
// keep no bucket and never take overdraft.
func (l *Limit) TakesOverdraft(byDefault bool) bool {
	if l.Unlimited || l.DenyAll {
		return false
	}
	return l.Overdraft == OverdraftOn || l.Overdraft == OverdraftDefault && byDefault && l.Rate.Algorithm() != algorithms.Concurrency
}

// QuotaFallback is what a quota client does without an assignment in
// force: allow every request (the default, as Envoy's rate_limit_quota
// filter does), deny every one, or ask the service per request.
type QuotaFallback uint8

// Quota fallbacks, as a policy file names them.
const (
	QuotaAllow QuotaFallback = iota // "allow"
	QuotaDeny                       // "deny"
	QuotaAsk                        // "ask"
)

var quotaFallbacks = [...]string{QuotaAllow: "allow", QuotaDeny: "deny", QuotaAsk: "ask"}

// String returns the fallback as a policy file names it.
func (f QuotaFallback) String() string {
	if int(f) < len(quotaFallbacks) {
		return quotaFallbacks[f]
	}
	return "QuotaFallback(" + strconv.Itoa(int(f)) + ")"
}

func parseQuotaFallback(s string) (QuotaFallback, bool) {
	i := slices.Index(quotaFallbacks[:], s)
	return QuotaFallback(max(i, 0)), i >= 0
}

// Unit is a policy file's rate_limit.unit.
type Unit uint8

// Units, as envoyproxy/ratelimit names them.
const (
	UnitNone Unit = iota
	UnitSecond
	UnitMinute
	UnitHour
	UnitDay
	UnitWeek
	UnitMonth
	UnitYear
)

// Domain returns the named domain, or nil when the policy has none.
func (p *Policy) Domain(name string) *Domain { return p.domains[name] }

// Domains returns the policy's domains sorted by name, in a new slice.
func (p *Policy) Domains() []*Domain {
	return append([]*Domain(nil), p.sorted...)
}

// HasLimits reports whether the domain has at least one limit that can
// deny: a limit of a rule (rate_limit or rate_limits, at any depth) that is
// not unlimited. A domain without one admits every request: it has no
// rules, or only unlimited ones.
func (d *Domain) HasLimits() bool { return d.root.hasLimits() }

func (n *node) hasLimits() bool {
	if n.rule != nil {
		for _, l := range n.rule.Limits {
			if !l.Unlimited {
				return true
			}
		}
	}
	for _, c := range n.exact {
		if c.hasLimits() {
			return true
		}
	}
	for _, w := range n.wildcard {
		if w.n.hasLimits() {
			return true
		}
	}
	for _, c := range n.keyOnly {
		if c.hasLimits() {
			return true
		}
	}
	return false
}
