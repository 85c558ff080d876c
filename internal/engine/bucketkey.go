package engine

import (
	"encoding/binary"

	"github.com/ratelimitd/ratelimitd/internal/config"
)

// BucketKey is what a bucket's store key is made of. Append encodes it and
// ParseBucketKey decodes it: the one encoding of bucket keys, which the
// engine charges the store with and a snapshot's keys are read back by.
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
	// Limit is the limit's config.Limit.Bucket: the kind of state its
	// algorithm keeps and its period (not its requests or burst, so that a
	// changed limit keeps its buckets), and "inline:" first for a limit the
	// request carried.
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
	return appendBucketKey(b, k.Domain, k.Entries, shared, k.Limit)
}

// appendBucketKey appends the key of the bucket that entries charge in
// domain under the limit of key limitKey, of a rule with shared
// (config.Rule.Shared; nil for none, and for an inline limit): the
// encoding of the BucketKey whose Entries are entries with each value at
// a depth where shared holds a pattern replaced by the pattern, without
// building that BucketKey.
func appendBucketKey(b []byte, domain string, entries []config.Entry, shared []string, limitKey string) []byte {
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
// A snapshot's buckets are restored only when InPolicy: a bucket of a limit
// removed while the daemon was down, or whose period changed, would never
// be charged again, and would only hold memory until it came to rest.
func (e *Engine) InPolicy(key []byte) bool {
	k, ok := ParseBucketKey(key)
	if !ok {
		return false
	}
	if config.IsInlineKey(k.Limit) {
		return !k.Shared
	}
	dom := e.policy.Load().Domain(k.Domain)
	if dom == nil {
		return false
	}
	rule := dom.Match(k.Entries)
	if rule == nil || k.Shared != (rule.Shared != nil) {
		return false
	}
	for i, pattern := range rule.Shared {
		if pattern != "" && (i >= len(k.Entries) || k.Entries[i].Value != pattern) {
			return false
		}
	}
	for _, l := range rule.Limits {
		if l.Bucket != "" && l.Bucket == k.Limit {
			return true
		}
	}
	return false
}
