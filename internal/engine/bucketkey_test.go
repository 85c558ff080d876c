package engine

import (
	"bytes"
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// keyRecorder is a memory store that remembers the key of every charge.
type keyRecorder struct {
	*memory.Store
	mu   sync.Mutex
	keys map[string][]byte // by what the test calls the bucket
	name string
}

func (r *keyRecorder) Apply(ctx context.Context, charges []store.Charge, d []algorithms.Decision) error {
	r.mu.Lock()
	for i, c := range charges {
		r.keys[r.name+"#"+string(rune('0'+i))] = append([]byte(nil), c.Key...)
	}
	r.mu.Unlock()
	return r.Store.Apply(ctx, charges, d)
}

func TestInPolicy(t *testing.T) {
	const before = `
domain: shop
descriptors:
  - key: path
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 600, burst: 800, algorithm: token_bucket}
  - key: remote_address
    rate_limits:
      - {unit: second, requests_per_unit: 50, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 5000}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	// The user limit's rate changes (its buckets stay, and what they hold),
	// the hourly limit goes, the sliding window stays as it was, the api_key
	// limit's period changes (new buckets).
	const after = `
domain: shop
descriptors:
  - key: path
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 500, burst: 800, algorithm: token_bucket}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 50, algorithm: sliding_window}
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 100}
`
	pBefore, err := config.Parse("shop.yaml", []byte(before))
	if err != nil {
		t.Fatal(err)
	}
	pAfter, err := config.Parse("shop.yaml", []byte(after))
	if err != nil {
		t.Fatal(err)
	}
	other, err := config.Parse("other.yaml", []byte("domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &keyRecorder{Store: memory.New(clock.NewFake(t0)), keys: map[string][]byte{}}
	e := New(pBefore, rec)
	ask := func(name string, req *Request) {
		rec.name = name
		decide(t, e, req)
	}
	ask("user", &Request{Domain: "shop", Descriptors: []Descriptor{{Entries: entries("path", "/orders", "user", "alice")}}})
	ask("addr", &Request{Domain: "shop", Descriptors: []Descriptor{{Entries: entries("remote_address", "10.0.0.1")}}})
	ask("api", &Request{Domain: "shop", Descriptors: []Descriptor{{Entries: entries("api_key", "k1")}}})
	ask("inline", &Request{Domain: "shop", Descriptors: []Descriptor{{
		Entries: entries("tenant", "t1"),
		Limit:   &InlineLimit{Algorithm: algorithms.TokenBucket, Requests: 10, Period: time.Second},
	}}})
	want := map[string][2]bool{ // in the policy before, after
		"user#0":   {true, true},
		"addr#0":   {true, true},
		"api#0":    {true, false},
		"addr#1":   {true, false},
		"inline#0": {true, true},
	}
	if len(rec.keys) != len(want) {
		t.Fatalf("charged %d buckets, want %d: %q", len(rec.keys), len(want), rec.keys)
	}
	for i, p := range []*config.Policy{pBefore, pAfter} {
		e.SetPolicy(p)
		for name, key := range rec.keys {
			// The recorder numbers charges within a request; the sliding
			// window is the first of the two remote_address limits.
			if got := e.InPolicy(key); got != want[name][i] {
				t.Errorf("policy %d: InPolicy(%s %q) = %v, want %v", i, name, key, got, want[name][i])
			}
		}
	}
	e.SetPolicy(other)
	for name, key := range rec.keys {
		if e.InPolicy(key) != (name == "inline#0") {
			t.Errorf("with domain shop gone, InPolicy(%s) = %v", name, e.InPolicy(key))
		}
	}
	e.SetPolicy(pBefore)
	for _, bad := range []string{"", "\x04shop", "\x04shop\x04path", "\x09shop", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "\x04shop\x04path\x07/orders"} {
		if e.InPolicy([]byte(bad)) {
			t.Errorf("InPolicy(%q) = true for a key the engine could not have made", bad)
		}
	}
}

// BenchmarkInPolicy: the cost per bucket that restoring a snapshot adds
// for checking the limit is still in force (the default policy's
// per-user-per-endpoint key).
func BenchmarkInPolicy(b *testing.B) {
	rec := &keyRecorder{Store: memory.New(clock.NewFake(t0)), keys: map[string][]byte{}}
	e := New(config.Default(), rec)
	rec.name = "k"
	var resp Response
	if err := e.ShouldRateLimit(context.Background(), &Request{Domain: "default", Descriptors: []Descriptor{{Entries: entries("path", "/api/v1/orders", "user", "user-0001234")}}}, &resp); err != nil {
		b.Fatal(err)
	}
	key := rec.keys["k#0"]
	for b.Loop() {
		if !e.InPolicy(key) {
			b.Fatal("not in policy")
		}
	}
}

// TestInPolicySharedBuckets: the buckets of share_threshold rules are in
// the policy (a snapshot keeps them across a restart), and only the keys
// the engine makes for them: not a shared key whose value is not the
// rule's pattern, not an unshared key of the shared rule.
func TestInPolicySharedBuckets(t *testing.T) {
	rec := &keyRecorder{Store: memory.New(clock.NewFake(t0)), keys: map[string][]byte{}}
	p, err := config.Parse("share.yaml", []byte(sharePolicy))
	if err != nil {
		t.Fatal(err)
	}
	e := New(p, rec)
	for _, req := range [][]string{
		{"path", "/uploads/a.png"},
		{"bucket", "cold-eu", "tenant", "acme"},
		{"route", "/api/v1/orders"},
		{"path", "/thumbs/a.png"},
	} {
		rec.name = req[1]
		decide(t, e, &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries(req...)}}})
		key := rec.keys[rec.name+"#0"]
		if !e.InPolicy(key) {
			t.Errorf("InPolicy(the bucket of %v) = false, want true", req)
		}
	}
	limit := p.Domain("d").Match(entries("path", "/uploads/a.png")).Limits[0].Key
	for _, k := range []BucketKey{
		{Domain: "d", Entries: entries("path", "/uploads/a.png"), Shared: true, Limit: limit}, // a value, not the pattern
		{Domain: "d", Entries: entries("path", "/uploads/*"), Limit: limit},                   // not marked shared
		{Domain: "d", Entries: entries("path", "/thumbs/*"), Shared: true, Limit: limit},      // a rule that does not share
	} {
		if e.InPolicy(k.Append(nil)) {
			t.Errorf("InPolicy(%+v) = true for a key the engine could not have made", k)
		}
	}
}

// TestBucketKeyRoundTrip: for keys of every shape — plain, a wildcard's
// value, share_threshold at any depth, inline, a bucket of shares (the
// limit's whole Key), a quota client's BucketId (no limit), empty and long
// values —
// ParseBucketKey gives back what the engine's encoding was made of (with
// shared values replaced by their pattern), BucketKey.Append gives back
// the same bytes, and two keys made of different parts never share bytes.
func TestBucketKeyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 23))
	str := func() string {
		switch rng.IntN(6) {
		case 0:
			return ""
		case 1:
			return strings.Repeat("v", 100+rng.IntN(2000)) // a multi-byte length
		case 2:
			return "share_threshold" // the mark itself, as a value
		case 3:
			return "/uploads/*"
		}
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	inline, err := config.NewInlineLimit("n", algorithms.TokenBucket, 1, 24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]BucketKey{}
	for range 20_000 {
		domain := str()
		es := make([]config.Entry, 1+rng.IntN(4))
		for i := range es {
			es[i] = config.Entry{Key: str(), Value: str()}
		}
		var shared []string
		limit := "bucket/1m0s" // a store's bucket: config.Limit.Bucket
		switch rng.IntN(5) {
		case 0: // share_threshold at some depths
			shared = make([]string, len(es))
			for i := range shared {
				if rng.IntN(2) == 0 {
					shared[i] = "pattern*" + str()
				}
			}
		case 1:
			limit = inline.Key
		case 2: // a bucket of shares: config.Limit.Key, shared or not
			limit = "token_bucket/600/1m0s/600"
			if rng.IntN(2) == 0 {
				shared = make([]string, len(es))
				shared[rng.IntN(len(es))] = "pattern*" + str()
			}
		case 3: // a quota client's BucketId: no limit
			limit = ""
		}
		key := AppendBucketKey(nil, domain, es, shared, limit)

		want := BucketKey{Domain: domain, Entries: slices.Clone(es), Shared: shared != nil, Limit: limit}
		for i, p := range shared {
			if p != "" {
				want.Entries[i].Value = p
			}
		}
		got, ok := ParseBucketKey(key)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseBucketKey(%q) = %+v, %v; want %+v", key, got, ok, want)
		}
		if again := got.Append(nil); !bytes.Equal(again, key) {
			t.Fatalf("Append(ParseBucketKey(%q)) = %q", key, again)
		}
		if prev, dup := seen[string(key)]; dup && !reflect.DeepEqual(prev, want) {
			t.Fatalf("%+v and %+v share the key %q", prev, want, key)
		}
		seen[string(key)] = want
	}
}

// TestParseBucketKeyRefuses: bytes the encoding could not have written are
// refused, and whatever is accepted encodes back to the same bytes.
func TestParseBucketKeyRefuses(t *testing.T) {
	for _, bad := range []string{
		"", "\x01d", "\x01d\x01k\x01v", // fewer than a domain, an entry and a limit
		"\x01d\x01k\x01v\x01x\x01l",     // five parts, the fourth not the mark
		"\x01d\x0fshare_threshold\x01l", // shared without an entry
		"\x81\x00d\x01k\x01v\x01l",      // a length not in its shortest form
		"\x05d\x01k\x01v\x01l",          // a length past the end
	} {
		if k, ok := ParseBucketKey([]byte(bad)); ok {
			t.Errorf("ParseBucketKey(%q) = %+v, want refused", bad, k)
		}
	}
	rng := rand.New(rand.NewPCG(2, 23))
	for range 50_000 {
		b := make([]byte, rng.IntN(16))
		for i := range b {
			b[i] = byte(rng.IntN(6)) // mostly short lengths
		}
		if k, ok := ParseBucketKey(b); ok && !bytes.Equal(k.Append(nil), b) {
			t.Fatalf("ParseBucketKey(%q) accepted %+v, which encodes as %q", b, k, k.Append(nil))
		}
	}
}
