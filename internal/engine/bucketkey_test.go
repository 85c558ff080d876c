package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/config"
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
`
	// The user limit's rate changes, the hourly limit goes, the sliding
	// window stays as it was.
	const after = `
domain: shop
descriptors:
  - key: path
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 500, burst: 800, algorithm: token_bucket}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 50, algorithm: sliding_window}
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
	ask("inline", &Request{Domain: "shop", Descriptors: []Descriptor{{
		Entries: entries("tenant", "t1"),
		Limit:   &InlineLimit{Algorithm: algorithms.TokenBucket, Requests: 10, Period: time.Second},
	}}})
	want := map[string][2]bool{ // in the policy before, after
		"user#0":   {true, false},
		"addr#0":   {true, true},
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
