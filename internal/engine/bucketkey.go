package engine

import (
	"encoding/binary"

	"github.com/ratelimitd/ratelimitd/internal/config"
)

// InPolicy reports whether the policy in force would charge the bucket
// whose store key is key: its domain is in the policy, its entries match a
// rule there, and that rule has a limit with the key's config.Limit.Key —
// so the same domain, descriptor and arithmetic. Inline limits' buckets
// are always in the policy: a request carries the limit itself, and a
// changed inline limit is another key. A key the engine could not have
// made is not in the policy.
//
// A snapshot's buckets are restored only when InPolicy: a bucket of a limit
// removed or changed while the daemon was down would never be charged
// again, and would only hold memory until it came to rest.
func (e *Engine) InPolicy(key []byte) bool {
	parts := make([]string, 0, 8)
	for len(key) > 0 {
		l, w := binary.Uvarint(key)
		if w <= 0 || l > uint64(len(key)-w) {
			return false
		}
		parts = append(parts, string(key[w:w+int(l)]))
		key = key[w+int(l):]
	}
	n := len(parts)
	if n < 3 || n%2 != 0 {
		return false
	}
	limitKey := parts[n-1]
	if config.IsInlineKey(limitKey) {
		return true
	}
	dom := e.policy.Load().Domain(parts[0])
	if dom == nil {
		return false
	}
	entries := make([]config.Entry, 0, (n-2)/2)
	for i := 1; i < n-1; i += 2 {
		entries = append(entries, config.Entry{Key: parts[i], Value: parts[i+1]})
	}
	rule := dom.Match(entries)
	if rule == nil {
		return false
	}
	for _, l := range rule.Limits {
		if l.Key == limitKey {
			return true
		}
	}
	return false
}
