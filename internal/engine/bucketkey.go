package engine

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// BucketKey is what a bucket's key is made of. Append (or AppendBucketKey)
// encodes it and ParseBucketKey decodes it: the one encoding of bucket
// keys, which the engine charges the store with, a snapshot's keys are read
// back by, and the quota service (internal/engine/quotaservice) names its
// buckets of shares, their ledger entries and its clients' BucketIds by.
type BucketKey struct {
	// Domain is the request's domain.
	Domain string
	// Entries are the descriptor's entries as the bucket names them: the
	// request's, except that at a share_threshold depth the value is the
	// wildcard pattern (config.Rule.Shared) every value it matches shares.
	Entries []config.Entry
	// Shared: the bucket is a share_threshold rule's (config.Rule.Shared
	// is not nil).
	Shared bool
	// Limit is, for a bucket of the store, the limit's config.Limit.Bucket:
	// the kind of state its algorithm keeps and its period (not its
	// requests or burst, so that a changed limit keeps its buckets), and
	// "inline:" first for a limit the request carried. For a bucket of
	// shares (the quota service) it is the limit's config.Limit.Key, its
	// whole arithmetic; for a quota client's name of a bucket (an RLQS
	// BucketId, which no limit is part of) it is empty.
	Limit string
}

// shareMark is the part a shared bucket's key has before its limit key.
const shareMark = "share_threshold"

// Append appends k's encoding to b: every part length-prefixed (a uvarint
// in its shortest form, then the bytes) — the domain, each entry's key and
// value, shareMark when Shared, the limit key. So distinct BucketKeys
// never share an encoding: a shared bucket's key has an odd number of
// parts, any other an even number.
func (k *BucketKey) Append(b []byte) []byte {
	var shared []string
	if k.Shared {
		shared = []string{} // not nil, substituting nothing
	}
	return AppendBucketKey(b, k.Domain, k.Entries, shared, k.Limit)
}

// AppendBucketKey appends the key of the bucket that entries charge in
// domain under the limit of key limitKey, of a rule with shared
// (config.Rule.Shared; nil for none, and for an inline limit): the
// encoding of the BucketKey whose Entries are entries with each value at
// a depth where shared holds a pattern replaced by the pattern, and whose
// Shared is shared != nil, without building that BucketKey.
func AppendBucketKey(b []byte, domain string, entries []config.Entry, shared []string, limitKey string) []byte {
	b = appendPart(b, domain)
	for i, e := range entries {
		b = appendPart(b, e.Key)
		if i < len(shared) && shared[i] != "" {
			b = appendPart(b, shared[i])
		} else {
			b = appendPart(b, e.Value)
		}
	}
	if shared != nil {
		b = appendPart(b, shareMark)
	}
	return appendPart(b, limitKey)
}

func appendPart(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ParseBucketKey decodes a key that BucketKey.Append encoded, with at
// least one entry. It reports false for bytes Append could not have
// written, so that for every key it accepts, Append gives back key itself.
func ParseBucketKey(key []byte) (BucketKey, bool) {
	parts := make([]string, 0, 8)
	var shortest [binary.MaxVarintLen64]byte
	for len(key) > 0 {
		l, w := binary.Uvarint(key)
		if w <= 0 || l > uint64(len(key)-w) || w != binary.PutUvarint(shortest[:], l) {
			return BucketKey{}, false
		}
		parts = append(parts, string(key[w:w+int(l)]))
		key = key[w+int(l):]
	}
	n := len(parts)
	k := BucketKey{Shared: n%2 == 1}
	if k.Shared {
		if n < 5 || parts[n-2] != shareMark {
			return BucketKey{}, false
		}
		parts = append(parts[:n-2], parts[n-1])
		n--
	}
	if n < 4 {
		return BucketKey{}, false
	}
	k.Domain, k.Limit = parts[0], parts[n-1]
	k.Entries = make([]config.Entry, 0, (n-2)/2)
	for i := 1; i < n-1; i += 2 {
		k.Entries = append(k.Entries, config.Entry{Key: parts[i], Value: parts[i+1]})
	}
	return k, true
}

// InPolicy reports whether the policy in force would charge the bucket
// whose store key is key: its domain is in the policy, its entries match a
// rule there, the rule shares its buckets (share_threshold) exactly where
// the key does, and the rule has a limit with the key's
// config.Limit.Bucket — so the same domain, descriptor, kind of state and
// period. Inline limits' buckets are always in the policy: a request
// carries the limit itself. A key the engine could not have made is not in
// the policy.
//
// A snapshot's buckets are restored only when InPolicy (see Adopt): a
// bucket of a limit removed while the daemon was down, or whose period
// changed, would never be charged again, and would only hold memory until
// it came to rest.
func (e *Engine) InPolicy(key []byte) bool {
	k, ok := ParseBucketKey(key)
	if !ok {
		return false
	}
	if config.IsInlineKey(k.Limit) {
		return !k.Shared
	}
	rule := e.ruleOf(&k)
	if rule == nil {
		return false
	}
	for _, l := range rule.Limits {
		if l.Bucket != "" && l.Bucket == k.Limit {
			return true
		}
	}
	return false
}

// ruleOf returns the rule of the policy in force that charges the buckets
// of k's domain and entries, shared exactly as k says; nil for none.
func (e *Engine) ruleOf(k *BucketKey) *config.Rule {
	dom := e.policy.Load().Domain(k.Domain)
	if dom == nil {
		return nil
	}
	rule := dom.Match(k.Entries)
	if rule == nil || k.Shared != (rule.Shared != nil) {
		return nil
	}
	for i, pattern := range rule.Shared {
		if pattern != "" && (i >= len(k.Entries) || k.Entries[i].Value != pattern) {
			return nil
		}
	}
	return rule
}

// Adopt returns what becomes of a bucket of a snapshot of the given format
// version (internal/store/snapshot): the key and state to restore it under, and
// whether to restore it at all. A bucket of a version 4 snapshot is kept as
// it is when InPolicy. One of an earlier version is converted first: its
// key named the limit by its whole arithmetic (config.Limit.Key), which
// becomes the Bucket of the rule's limit with that Key or, when its
// requests or burst changed while the daemon was down, of the rule's first
// limit with the same kind of state and period; and a bucket algorithm's
// state, which did not record its rate, records the old limit's
// (algorithms.State.WrittenBy), so that what was used stays used.
func (e *Engine) Adopt(key []byte, st algorithms.State, version int) ([]byte, algorithms.State, bool) {
	if version >= 4 {
		return key, st, e.InPolicy(key)
	}
	k, ok := ParseBucketKey(key)
	if !ok {
		return nil, st, false
	}
	inline := config.IsInlineKey(k.Limit)
	old, ok := parseLimitKey(strings.TrimPrefix(k.Limit, config.InlinePrefix))
	if !ok {
		return nil, st, false
	}
	st = st.WrittenBy(&old)
	name := config.BucketName("", &old)
	if inline {
		k.Limit = config.InlinePrefix + name
		return k.Append(nil), st, !k.Shared
	}
	rule := e.ruleOf(&k)
	if rule == nil {
		return nil, st, false
	}
	var bucket string
	for _, l := range rule.Limits {
		if l.Bucket != "" && l.Key == k.Limit {
			bucket = l.Bucket // the limit, unchanged
			break
		}
		if l.Bucket == name && bucket == "" {
			bucket = l.Bucket // the first limit of its kind and period
		}
	}
	if bucket == "" {
		return nil, st, false
	}
	k.Limit = bucket
	return k.Append(nil), st, true
}

// parseLimitKey returns the limit whose config.Limit.Key (without
// "inline:") is s, as snapshots of version 3 and earlier named limits in
// bucket keys: "algorithm/requests/period/capacity".
func parseLimitKey(s string) (algorithms.Limit, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return algorithms.Limit{}, false
	}
	alg, err := algorithms.ParseAlgorithm(parts[0])
	if err != nil {
		return algorithms.Limit{}, false
	}
	requests, err1 := strconv.ParseInt(parts[1], 10, 64)
	period, err2 := time.ParseDuration(parts[2])
	capacity, err3 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return algorithms.Limit{}, false
	}
	burst := capacity
	if alg == algorithms.FixedWindow || alg == algorithms.SlidingWindow || alg == algorithms.Concurrency {
		burst = 0
	}
	l, err := algorithms.NewLimit(alg, requests, period, burst)
	return l, err == nil
}
