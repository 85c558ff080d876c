package memory

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

var mustLimit, apply = storetest.MustLimit, storetest.Apply

// TestDenialAcrossShards drives requests whose two keys live on different
// shards until one key is exhausted, and checks that the other key was
// charged exactly as often as whole requests were admitted.
func TestDenialAcrossShards(t *testing.T) {
	s := New(clock.NewFake(t0), WithShards(64))
	wide := mustLimit(t, algorithms.FixedWindow, 100, time.Minute, 0)
	narrow := mustLimit(t, algorithms.FixedWindow, 7, time.Minute, 0)
	a, b := []byte("a"), []byte("b")
	for s.shardOf(a) == s.shardOf(b) {
		b = append(b, 'b')
	}
	admitted := 0
	for range 20 {
		d := apply(t, s, store.Charge{Domain: storetest.Domain, Key: a, Limit: wide, Cost: 1}, store.Charge{Domain: storetest.Domain, Key: b, Limit: narrow, Cost: 1})
		if d[0].Code == algorithms.Allowed && d[1].Code == algorithms.Allowed {
			admitted++
		}
	}
	if admitted != 7 {
		t.Fatalf("admitted %d requests, want 7", admitted)
	}
	if d := apply(t, s, store.Charge{Domain: storetest.Domain, Key: a, Limit: wide}); d[0].Remaining != 93 {
		t.Fatalf("wide bucket has %d remaining, want 93 (charged only by admitted requests)", d[0].Remaining)
	}
}

func TestBoundedAndReclaimed(t *testing.T) {
	c := clock.NewFake(t0)
	s := New(c, WithShards(4), WithMaxBuckets(100))
	l := mustLimit(t, algorithms.TokenBucket, 1, time.Second, 0)
	for i := range 1000 {
		apply(t, s, store.Charge{Domain: storetest.Domain, Key: []byte(fmt.Sprintf("key-%d", i)), Limit: l, Cost: 1})
	}
	if n := s.Len(); n > 100 {
		t.Fatalf("holds %d buckets, bound is 100", n)
	}
	if s.Evictions() == 0 {
		t.Fatal("a full store of busy buckets evicted none")
	}

	// A second later every bucket is back at rest: new keys reclaim them
	// rather than evict, and Sweep empties the store.
	c.Advance(time.Second)
	before := s.Evictions()
	for i := range 50 {
		apply(t, s, store.Charge{Domain: storetest.Domain, Key: []byte(fmt.Sprintf("new-%d", i)), Limit: l, Cost: 1})
	}
	if s.Evictions() != before {
		t.Fatalf("evicted %d busy buckets while idle ones could be reclaimed", s.Evictions()-before)
	}
	c.Advance(time.Second)
	s.Sweep()
	if n := s.Len(); n != 0 {
		t.Fatalf("after Sweep with every bucket at rest, %d remain", n)
	}
}

func TestPeekCreatesNoBucket(t *testing.T) {
	s := New(clock.NewFake(t0))
	l := mustLimit(t, algorithms.SlidingWindow, 5, time.Second, 0)
	d := apply(t, s, store.Charge{Domain: storetest.Domain, Key: []byte("k"), Limit: l, Cost: 0})
	if d[0].Code != algorithms.Allowed || d[0].Remaining != 5 {
		t.Fatalf("peek of a new bucket: %+v", d[0])
	}
	if s.Len() != 0 {
		t.Fatal("a peek stored a bucket")
	}
}

// BenchmarkApply measures one charge on one of many keys: keys stored as
// they are, and keys of 96 bytes and of 1 KB stored as their digests.
func BenchmarkApply(b *testing.B) {
	for _, keyLen := range []int{32, 96, 1024} {
		b.Run(fmt.Sprintf("key=%dB", keyLen), func(b *testing.B) {
			keys := make([][]byte, 1024)
			for i := range keys {
				keys[i] = fmt.Appendf(bytes.Repeat([]byte("v"), keyLen-6), "%06d", i)
			}
			chargeKeys(b, mustLimit(b, algorithms.TokenBucket, 1_000_000_000, time.Hour, 0), keys)
		})
	}
}

// chargeKeys charges keys in turn, from every goroutine of RunParallel, in
// a new store.
func chargeKeys(b *testing.B, l *algorithms.Limit, keys [][]byte) {
	s := New(clock.NewMonotonic())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		charges := []store.Charge{{Domain: storetest.Domain, Limit: l, Cost: 1}}
		d := make([]algorithms.Decision, 1)
		i := 0
		for pb.Next() {
			charges[0].Key = keys[i%len(keys)]
			s.Apply(context.Background(), charges, d)
			i++
		}
	})
}

// BenchmarkBucketBytes reports the heap a store holds per bucket
// (HeapInuse and HeapAlloc after a garbage collection, minus the same
// before the store was made) for 1,000,000 buckets charged once and then
// idle (not yet at rest), and what the store accounts per bucket
// (Bytes/Len), for keys of 24 bytes, of MaxVerbatimKey bytes (the longest
// stored as they are) and of 2 KB (stored as digests). The churn variants
// charge 3,000,000 keys into a store bounded at room for 500,000, so that
// nearly every new bucket evicts one: the heap the store holds once it
// has churned through six times its room, as under a flood.
func BenchmarkBucketBytes(b *testing.B) {
	const n = 1_000_000
	for _, bc := range []struct {
		name   string
		keyLen int
		churn  bool
	}{
		{"key=24B", 24, false},
		{"key=64B", MaxVerbatimKey, false},
		{"key=2KB", 2048, false},
		{"key=24B/churn", 24, true},
		{"key=2KB/churn", 2048, true},
		{"key=64B/churn", MaxVerbatimKey, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := mustLimit(b, algorithms.TokenBucket, 1, time.Hour, 10)
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				opts := []Option{WithMaxBytes(1 << 40), WithMaxBuckets(n)}
				if bc.churn {
					stored := bc.keyLen
					if stored > MaxVerbatimKey || stored == DigestSize {
						stored = DigestSize
					}
					opts = []Option{WithMaxBytes(n / 2 * BucketBytes(stored))}
				}
				s := New(clock.NewFake(t0), opts...)
				fill(s, l, bc.keyLen, 0, n)
				if bc.churn {
					fill(s, l, bc.keyLen, n, 2*n)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				held := s.Len()
				if !bc.churn && held != n {
					b.Fatalf("holds %d buckets, want %d", held, n)
				}
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(held), "inuse-bytes/bucket")
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(held), "alloc-bytes/bucket")
				b.ReportMetric(float64(s.Bytes())/float64(held), "accounted-bytes/bucket")
				runtime.KeepAlive(s)
			}
		})
	}
}

// fill charges n distinct keys of keyLen bytes ('k's, then the key's
// number), numbered from first, once each.
func fill(s *Store, l *algorithms.Limit, keyLen, first, n int) {
	charges := []store.Charge{{Domain: storetest.Domain, Limit: l, Cost: 1}}
	d := make([]algorithms.Decision, 1)
	key := bytes.Repeat([]byte("k"), keyLen)
	for i := first; i < first+n; i++ {
		var num [20]byte
		digits := strconv.AppendInt(num[:0], int64(i), 10)
		copy(key[keyLen-len(digits):], digits)
		charges[0].Key = key
		s.Apply(context.Background(), charges, d)
	}
}

// TestInsertBesideReclaimedBucket: when a request inserts a new bucket and
// also charges one that is back at rest but not yet swept, the insertion
// may reclaim that bucket's place; the charge must still land on the right
// key, and neither bucket may take the other's state.
func TestInsertBesideReclaimedBucket(t *testing.T) {
	c := clock.NewFake(t0)
	s := New(c, WithShards(1))
	five := mustLimit(t, algorithms.FixedWindow, 5, time.Minute, 0)
	hundred := mustLimit(t, algorithms.FixedWindow, 100, time.Minute, 0)
	a := store.Charge{Domain: storetest.Domain, Key: []byte("a"), Limit: hundred, Cost: 1}
	b := store.Charge{Domain: storetest.Domain, Key: []byte("b"), Limit: five, Cost: 5}
	apply(t, s, b)
	c.Advance(61 * time.Second) // b is back at rest, still held

	apply(t, s, a, b)
	peekA := apply(t, s, store.Charge{Domain: storetest.Domain, Key: a.Key, Limit: hundred})[0]
	peekB := apply(t, s, store.Charge{Domain: storetest.Domain, Key: b.Key, Limit: five})[0]
	if peekA.Remaining != 99 || peekB.Remaining != 0 {
		t.Fatalf("after charging a (1 of 100) and b (5 of 5): a has %d remaining, b %d; want 99 and 0",
			peekA.Remaining, peekB.Remaining)
	}
	if d := apply(t, s, store.Charge{Domain: storetest.Domain, Key: b.Key, Limit: five, Cost: 1})[0]; d.Code != algorithms.Denied {
		t.Fatalf("b admitted a sixth hit in its window: %+v", d)
	}
}

// TestBoundInBytes fills stores bounded in bytes with busy buckets (none
// at rest for an hour) of keys of each length class and checks that the
// accounted bytes stay within the bound, that the store holds as many
// buckets as the bound has room for, and that it evicted to get there.
func TestBoundInBytes(t *testing.T) {
	for _, tt := range []struct {
		name   string
		keyLen int
		stored int // bytes of the stored key
	}{
		{"short", 24, 24},
		{"longest verbatim", MaxVerbatimKey, MaxVerbatimKey},
		{"one past verbatim", MaxVerbatimKey + 1, DigestSize},
		{"digest length", DigestSize, DigestSize},
		{"20KB", 20 << 10, DigestSize},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const room = 200
			perBucket := BucketBytes(tt.stored)
			dom := DomainBytes(len(storetest.Domain)) // the buckets' one domain
			s := New(clock.NewFake(t0), WithShards(1), WithMaxBytes(room*perBucket+dom))
			l := mustLimit(t, algorithms.TokenBucket, 1, time.Hour, 10)
			fill(s, l, tt.keyLen, 0, 1000)
			if s.Len() != room {
				t.Errorf("holds %d buckets of %d-byte keys, want %d (the bound's room)", s.Len(), tt.keyLen, room)
			}
			if s.Bytes() != int64(s.Len())*perBucket+dom {
				t.Errorf("accounts %d bytes for %d buckets of one domain, want %d each and %d for the domain", s.Bytes(), s.Len(), perBucket, dom)
			}
			if s.Bytes() > s.MaxBytes() {
				t.Errorf("accounts %d bytes, past the bound of %d", s.Bytes(), s.MaxBytes())
			}
			if s.Evictions() != 1000-room {
				t.Errorf("evicted %d buckets, want %d", s.Evictions(), 1000-room)
			}
		})
	}
}

// TestEvictsNearestRestByBytes: a store full of busy buckets evicts, for a
// bucket that needs the room of two, the two sampled buckets that would
// come to rest soonest, and keeps the one furthest from rest.
func TestEvictsNearestRestByBytes(t *testing.T) {
	c := clock.NewFake(t0)
	short := BucketBytes(8)
	s := New(c, WithShards(1), WithMaxBytes(3*short+DomainBytes(len(storetest.Domain))))
	l := mustLimit(t, algorithms.TokenBucket, 1, time.Hour, 10)
	// Costs 3, 1, 2: "key-b" rests first, then "key-c", then "key-a".
	for _, k := range []struct {
		key  string
		cost int64
	}{{"key-a", 3}, {"key-b", 1}, {"key-c", 2}} {
		apply(t, s, store.Charge{Domain: storetest.Domain, Key: []byte(k.key), Limit: l, Cost: k.cost})
	}
	long := bytes.Repeat([]byte("x"), MaxVerbatimKey)
	if 2*short+BucketBytes(len(long)) <= 3*short || short+BucketBytes(len(long)) > 3*short {
		t.Fatalf("test assumes a %d-byte key needs the room of exactly two %d-byte buckets", len(long), short)
	}
	apply(t, s, store.Charge{Domain: storetest.Domain, Key: long, Limit: l, Cost: 1})

	if s.Len() != 2 || s.Evictions() != 2 {
		t.Fatalf("holds %d buckets after %d evictions, want 2 after 2", s.Len(), s.Evictions())
	}
	for _, k := range []struct {
		key       string
		remaining int64
	}{{"key-a", 7}, {"key-b", 10}, {"key-c", 10}, {string(long), 9}} {
		d := apply(t, s, store.Charge{Domain: storetest.Domain, Key: []byte(k.key), Limit: l})[0]
		if d.Remaining != k.remaining {
			t.Errorf("%.8s...: %d remaining, want %d", k.key, d.Remaining, k.remaining)
		}
	}
}

// TestLongKeysAreDistinct: keys stored as digests keep a bucket each, even
// when they differ only in their last byte, and a key charged again finds
// its bucket.
func TestLongKeysAreDistinct(t *testing.T) {
	s := New(clock.NewFake(t0))
	l := mustLimit(t, algorithms.FixedWindow, 3, time.Minute, 0)
	base := bytes.Repeat([]byte("v"), 2048)
	var keys [][]byte
	for _, n := range []int{DigestSize, MaxVerbatimKey + 1, 2048} {
		for last := byte('a'); last <= 'c'; last++ {
			k := append(slices.Clone(base[:n-1]), last)
			keys = append(keys, k)
		}
	}
	for i, k := range keys {
		// Charge key i i%3+1 times: each must see only its own charges.
		for j := range i%3 + 1 {
			d := apply(t, s, store.Charge{Domain: storetest.Domain, Key: k, Limit: l, Cost: 1})[0]
			if want := int64(3 - j - 1); d.Remaining != want {
				t.Fatalf("key %d (%d bytes), charge %d: %d remaining, want %d", i, len(k), j+1, d.Remaining, want)
			}
		}
	}
	want := int64(len(keys))*BucketBytes(DigestSize) + DomainBytes(len(storetest.Domain))
	if s.Len() != len(keys) || s.Bytes() != want {
		t.Fatalf("holds %d buckets in %d bytes, want %d in %d", s.Len(), s.Bytes(), len(keys), want)
	}
}

// A bucket in debt is kept until it is back at rest, debt included: Sweep
// leaves it while it would deny, and reclaims it once at rest. A check and
// a refund of a bucket the store does not hold store nothing.
func TestDebtIsKeptUntilRest(t *testing.T) {
	c := clock.NewFake(t0)
	s := New(c)
	l := mustLimit(t, algorithms.TokenBucket, 10, time.Second, 0) // at rest 1s after a full charge
	key := []byte("tokens")
	charge := func(kind algorithms.Kind, cost int64) algorithms.Decision {
		return apply(t, s, store.Charge{Domain: storetest.Domain, Key: key, Limit: l, Cost: cost, Kind: kind})[0]
	}
	for _, kind := range []algorithms.Kind{algorithms.Check, algorithms.Refund} {
		if d := charge(kind, 5); d.Code != algorithms.Allowed || s.Len() != 0 {
			t.Fatalf("a %v of a new bucket: %+v, %d buckets held; want allowed, none", kind, d, s.Len())
		}
	}
	// 30 tokens taken of 10: 20 in debt, 3s until at rest.
	if d := charge(algorithms.Overdraft, 30); d.Code != algorithms.Denied || d.ResetAfter != 3*time.Second {
		t.Fatalf("an overdraft of 30 on 10: %+v, want denied, at rest in 3s", d)
	}
	c.Advance(3*time.Second - time.Nanosecond)
	s.Sweep()
	if s.Len() != 1 {
		t.Fatal("Sweep reclaimed a bucket still in debt")
	}
	if d := charge(algorithms.Check, 0); d.Code != algorithms.Allowed || d.Remaining != 9 {
		t.Fatalf("a check 1ns before rest: %+v, want allowed, 9 remaining", d)
	}
	c.Advance(time.Nanosecond)
	s.Sweep()
	if s.Len() != 0 {
		t.Fatal("Sweep kept a bucket at rest")
	}
}

// BenchmarkInsert measures the insertion of new buckets into a full store
// of busy buckets (room for 100,000 of them), where every insertion evicts
// one: the path a flood of unique keys takes. Each goroutine charges keys
// of its own in one of four domains.
func BenchmarkInsert(b *testing.B) {
	const room = 100_000
	s := New(clock.NewFake(t0), WithMaxBuckets(room))
	l := mustLimit(b, algorithms.TokenBucket, 1, time.Hour, 10)
	fill(s, l, 24, 0, room)
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		charges := []store.Charge{{Domain: fmt.Sprint("domain-", g%4), Limit: l, Cost: 1}}
		d := make([]algorithms.Decision, 1)
		key := []byte(fmt.Sprintf("g%03d-kkkkkkkkkkkkkkkkkkkk", g))
		for i := 0; pb.Next(); i++ {
			charges[0].Key = strconv.AppendInt(key[:5], int64(i), 10)
			s.Apply(context.Background(), charges, d)
		}
	})
}

// TestAtRestPastMaxTime: past algorithms.MaxTime the clock stands still
// for Decide, and so it must for reclaiming: a bucket charged at MaxTime
// is not at rest 2ms later by the raw clock's reading, as Decide would
// still count its charge (a token bucket of 1 per millisecond, burst 1).
// Deleting it would admit a second charge that the Redis store denies.
func TestAtRestPastMaxTime(t *testing.T) {
	for _, reclaim := range []struct {
		name string
		run  func(s *Store)
	}{
		{"Sweep", func(s *Store) { s.Sweep() }},
		// An insertion into a full store evicts and reclaims.
		{"insertion", func(s *Store) {
			l := mustLimit(t, algorithms.TokenBucket, 1, time.Hour, 1)
			apply(t, s, store.Charge{Domain: storetest.Domain, Key: []byte("other"), Limit: l, Cost: 1})
		}},
	} {
		t.Run(reclaim.name, func(t *testing.T) {
			c := clock.NewFake(algorithms.MaxTime)
			s := New(c, WithShards(1), WithMaxBuckets(2))
			l := mustLimit(t, algorithms.TokenBucket, 1, time.Millisecond, 1)
			k := store.Charge{Domain: storetest.Domain, Key: []byte("k"), Limit: l, Cost: 1}
			if d := apply(t, s, k)[0]; d.Code != algorithms.Allowed {
				t.Fatalf("first charge at MaxTime: %+v", d)
			}
			c.Advance(2 * time.Millisecond)
			reclaim.run(s)
			if d := apply(t, s, k)[0]; d.Code != algorithms.Denied {
				t.Fatalf("second charge at MaxTime+2ms, after %s: %v, want denied (Decide's clock stands at MaxTime)", reclaim.name, d.Code)
			}
		})
	}
}

// TestFairShare: in a full store, a new bucket evicts only buckets of
// domains over their fair share (the bound over the domains holding
// buckets), its own domain's first, busy or not; a domain within its
// share keeps every bucket whatever another inserts.
func TestFairShare(t *testing.T) {
	c := clock.NewFake(t0)
	s := New(c, WithShards(1), WithMaxBuckets(10))
	l := mustLimit(t, algorithms.TokenBucket, 1, time.Hour, 1) // busy for an hour once charged
	charge := func(dom, key string) {
		t.Helper()
		apply(t, s, store.Charge{Domain: dom, Key: []byte(dom + "/" + key), Limit: l, Cost: 1})
	}
	held := func(dom, key string) bool {
		t.Helper()
		return apply(t, s, store.Charge{Domain: dom, Key: []byte(dom + "/" + key), Limit: l})[0].Remaining == 0
	}
	for i := range 3 {
		charge("small", fmt.Sprint(i)) // within its share of 5
	}
	for i := range 100 {
		charge("flood", fmt.Sprint(i))
	}
	for i := range 3 {
		if !held("small", fmt.Sprint(i)) {
			t.Errorf("small's bucket %d was evicted by flood's insertions", i)
		}
	}
	if s.Len() != 10 || !held("flood", "99") {
		t.Errorf("holds %d buckets (want the bound, 10), flood's newest held: %v", s.Len(), held("flood", "99"))
	}

	// Two domains at their share of 5 each: a new bucket of one evicts
	// its own domain's, never the other's.
	for i := range 2 {
		charge("small", fmt.Sprint("more-", i))
	}
	for i := range 20 {
		charge("small", fmt.Sprint("over-", i))
		if !held("small", fmt.Sprint("over-", i)) {
			t.Errorf("small's newest bucket over-%d was not kept", i)
		}
	}
	flood := 0
	for i := range 100 {
		if held("flood", fmt.Sprint(i)) {
			flood++
		}
	}
	if flood != 5 || s.Len() != 10 {
		t.Errorf("flood holds %d buckets of 10 (want its share, 5)", flood)
	}
}

// TestDomainCountsAddUp: under concurrent insertions, evictions and sweeps
// across domains that come and go, the per-domain counts always add up to
// the store's, and once everything is back at rest and swept, nothing is
// counted: no domain, no bucket, no byte.
func TestDomainCountsAddUp(t *testing.T) {
	c := clock.NewFake(t0)
	s := New(c, WithShards(4), WithMaxBuckets(64))
	l := mustLimit(t, algorithms.TokenBucket, 1, time.Second, 1)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				dom := fmt.Sprint("d", (g+i)%5)
				apply(t, s, store.Charge{Domain: dom, Key: fmt.Appendf(nil, "%d-%d", g, i), Limit: l, Cost: 1})
				if i%100 == 0 {
					s.Sweep()
				}
			}
		}()
	}
	wg.Wait()
	var buckets, bytes, domains int64
	s.domains.Range(func(_, v any) bool {
		d := v.(*domain)
		buckets, bytes, domains = buckets+d.buckets.Load(), bytes+d.bytes.Load(), domains+1
		return true
	})
	if buckets != int64(s.Len()) || bytes != s.Bytes() || domains != s.active.Load() {
		t.Errorf("domains count %d buckets, %d bytes, %d domains; the store %d, %d, %d",
			buckets, bytes, domains, s.Len(), s.Bytes(), s.active.Load())
	}
	c.Advance(time.Second)
	s.Sweep()
	s.domains.Range(func(k, _ any) bool { t.Errorf("domain %q still held", k); return true })
	if s.Len() != 0 || s.Bytes() != 0 || s.active.Load() != 0 {
		t.Errorf("after everything came to rest: %d buckets, %d bytes, %d domains", s.Len(), s.Bytes(), s.active.Load())
	}
}

// BenchmarkApplyHeld measures one charge on one of 1024 buckets that stay
// held (a window of a billion an hour: none comes to rest while the
// benchmark runs), so that every charge finds its bucket: the hot path,
// without the insertions and reclaims of BenchmarkApply, whose buckets
// come back to rest between two charges.
func BenchmarkApplyHeld(b *testing.B) {
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%026d", i)
	}
	chargeKeys(b, mustLimit(b, algorithms.FixedWindow, 1_000_000_000, time.Hour, 0), keys)
}

// BenchmarkApplyInFlight compares a concurrency's charges and releases with
// a token bucket's charges and refunds through the store: on 1024 keys,
// each charged 1 and then given it back, from every goroutine.
func BenchmarkApplyInFlight(b *testing.B) {
	for _, l := range []*algorithms.Limit{
		mustLimit(b, algorithms.TokenBucket, 1_000_000_000, time.Hour, 0),
		mustLimit(b, algorithms.Concurrency, algorithms.MaxInFlight, time.Hour, 0),
	} {
		b.Run(l.Algorithm().String(), func(b *testing.B) {
			keys := make([][]byte, 1024)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "tenant-%06d", i)
			}
			s := New(clock.NewMonotonic())
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				charges := []store.Charge{{Domain: storetest.Domain, Limit: l, Cost: 1}}
				d := make([]algorithms.Decision, 1)
				for i := 0; pb.Next(); i++ {
					charges[0].Key = keys[i/2%len(keys)]
					charges[0].Kind = [2]algorithms.Kind{algorithms.Admit, algorithms.Refund}[i%2]
					s.Apply(context.Background(), charges, d)
				}
			})
		})
	}
}
