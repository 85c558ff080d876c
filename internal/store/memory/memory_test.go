package memory

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
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

// BenchmarkApply measures one charge on one of many keys.
func BenchmarkApply(b *testing.B) {
	s := New(clock.NewMonotonic())
	l := mustLimit(b, algorithms.TokenBucket, 1_000_000_000, time.Hour, 0)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("domain/path=/orders/user=%06d", i))
	}
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

// BenchmarkIdleBucketMemory reports the heap held per bucket for 1,000,000
// buckets with 24-byte keys, charged once and then idle (not yet at rest).
func BenchmarkIdleBucketMemory(b *testing.B) {
	const n = 1_000_000
	l := mustLimit(b, algorithms.TokenBucket, 1, time.Hour, 10)
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := New(clock.NewFake(t0), WithMaxBuckets(n))
		charges := []store.Charge{{Domain: storetest.Domain, Limit: l, Cost: 1}}
		d := make([]algorithms.Decision, 1)
		key := make([]byte, 0, 24)
		for i := range n {
			key = fmt.Appendf(key[:0], "tenant-%017d", i) // 24 bytes
			charges[0].Key = key
			s.Apply(context.Background(), charges, d)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatalf("holds %d buckets, want %d", s.Len(), n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/bucket")
		runtime.KeepAlive(s)
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
