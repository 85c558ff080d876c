package client

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// Descriptor names one thing to charge: entries (key/value pairs) most
// general first, as [path=/orders, user=alice], and optionally its own cost
// and an inline limit. Build one with NewDescriptor and its With methods:
//
//	client.NewDescriptor("path", "/orders").With("user", "alice")
//
// A Descriptor is a value: each With method returns a new one and leaves
// the receiver unchanged, so a common prefix can be shared safely. The zero
// Descriptor has no entries; the service rejects it (InvalidArgument).
type Descriptor struct {
	entries []entry
	hits    uint32
	hasHits bool
	limit   *Limit
	op      ratelimitv1.Operation
	over    ratelimitv1.Overdraft
}

type entry struct{ key, value string }

// NewDescriptor returns a descriptor of one entry. The key must not be
// empty; the value may be.
func NewDescriptor(key, value string) Descriptor {
	return Descriptor{entries: []entry{{key, value}}}
}

// Pairs returns d's entries as key, value, key, value, ..., from the most
// general: a quota bucket's pairs (client/quota).
func (d Descriptor) Pairs() []string {
	pairs := make([]string, 0, 2*len(d.entries))
	for _, e := range d.entries {
		pairs = append(pairs, e.key, e.value)
	}
	return pairs
}

// With returns d with one more entry, one level deeper.
func (d Descriptor) With(key, value string) Descriptor {
	// The full slice expression makes append copy: descriptors built from
	// the same prefix never share a backing array.
	d.entries = append(d.entries[:len(d.entries):len(d.entries)], entry{key, value})
	return d
}

// WithHits returns d with its own cost, overriding the default of 1.
// WithHits(0) is a peek: the service reports the bucket, charges nothing
// and never denies it. The cost is part of the request that the local
// short-circuit compares: a peek is not the same request as a charge.
func (d Descriptor) WithHits(n uint32) Descriptor {
	d.hits, d.hasHits = n, true
	return d
}

// WithOperation returns d asking op of its buckets instead of a charge
// (ratelimitv1.Operation documents each): OPERATION_CHECK asks whether a
// charge of 1 would be admitted and charges nothing; OPERATION_REFUND
// gives its cost back. Reserve, Settle and Cancel make these calls for
// usage known only afterwards.
func (d Descriptor) WithOperation(op ratelimitv1.Operation) Descriptor {
	d.op = op
	return d
}

// WithOverdraft returns d's charge allowed to overdraw, or not, whatever
// the policy says (ratelimitv1.Overdraft): OVERDRAFT_ALWAYS takes the cost
// in full, into debt if need be, for usage that already happened;
// OVERDRAFT_NEVER admits it only if it fits. Only a charge may say it (the
// service answers a check or a refund that does InvalidArgument). A
// request holding a charge that always overdraws or a refund is always
// sent to the service: the local short-circuit never answers it, nor
// remembers its denial, as its charge must land.
func (d Descriptor) WithOverdraft(o ratelimitv1.Overdraft) Descriptor {
	d.over = o
	return d
}

// recordsUsage reports whether d's charge is applied whatever the service
// decides: a charge that always overdraws, or a refund.
func (d Descriptor) recordsUsage() bool {
	return d.over == ratelimitv1.Overdraft_OVERDRAFT_ALWAYS || d.op == ratelimitv1.Operation_OPERATION_REFUND
}

// WithLimit returns d decided by l instead of the service's policy, in any
// domain: for callers without a policy file.
func (d Descriptor) WithLimit(l Limit) Descriptor {
	d.limit = &l
	return d
}

// String returns the entries as "key=value, key=value".
func (d Descriptor) String() string {
	var b strings.Builder
	for i, e := range d.entries {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.key)
		b.WriteByte('=')
		b.WriteString(e.value)
	}
	return b.String()
}

// cost is the number of hits the descriptor charges.
func (d Descriptor) cost() uint32 {
	if d.hasHits {
		return d.hits
	}
	return 1
}

func (d Descriptor) proto() *ratelimitv1.Descriptor {
	out := &ratelimitv1.Descriptor{Entries: make([]*ratelimitv1.Entry, len(d.entries)), Operation: d.op, Overdraft: d.over}
	for i, e := range d.entries {
		out.Entries[i] = &ratelimitv1.Entry{Key: e.key, Value: e.value}
	}
	if d.hasHits {
		h := d.hits
		out.Hits = &h
	}
	if l := d.limit; l != nil {
		out.Limit = &ratelimitv1.Limit{
			Algorithm: l.Algorithm,
			Requests:  l.Requests,
			Period:    durationpb.New(l.Period),
			Burst:     l.Burst,
			Name:      l.Name,
		}
	}
	return out
}

// Limit is an inline limit: Requests per Period, decided by Algorithm, for
// a descriptor that the service's policy does not cover. The service
// validates it (InvalidArgument when malformed).
type Limit struct {
	// Algorithm; unset means fixed window. For ALGORITHM_CONCURRENCY,
	// Requests is the most units in flight at once (at most 65535) and
	// Period the lease after which a unit never released expires; Burst
	// must be 0. Its units are given back by Lease.Release (Acquire) or a
	// descriptor WithOperation(OPERATION_REFUND).
	Algorithm ratelimitv1.Algorithm
	// Requests admitted per Period; at least 1.
	Requests uint32
	// Period; positive.
	Period time.Duration
	// Burst is the capacity of the bucket algorithms (0: Requests); it must
	// be 0 for the window algorithms and a concurrency.
	Burst uint32
	// Name is reported back as the policy that decided.
	Name string
}

// SecretValue returns what a descriptor carries for a value that must not
// leave the process, such as a credential naming a user: the first 16
// bytes of its SHA-256 digest, in hex (32 characters). Equal values give
// equal results, so each still gets its own bucket, while the secret stays
// out of the rate limiter's logs and a long value stays within the
// service's bound on value length. The HTTP middleware and the gRPC
// interceptors name users this way, so one user gets the same buckets
// through either.
func SecretValue(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}
