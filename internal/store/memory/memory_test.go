package memory

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

func mustLimit(t testing.TB, alg algorithms.Algorithm, requests int64, period time.Duration, burst int64) *algorithms.Limit {
	t.Helper()
	l, err := algorithms.NewLimit(alg, requests, period, burst)
	if err != nil {
		t.Fatal(err)
	}
	return &l
}

func apply(t testing.TB, s *Store, charges ...store.Charge) []algorithms.Decision {
	t.Helper()
	d := make([]algorithms.Decision, len(charges))
	if err := s.Apply(context.Background(), charges, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func codes(ds []algorithms.Decision) []algorithms.Code {
	out := make([]algorithms.Code, len(ds))
	for i, d := range ds {
		out[i] = d.Code
	}
	return out
}

func TestAllOrNothing(t *testing.T) {
	ten := mustLimit(t, algorithms.TokenBucket, 10, time.Minute, 0)
	two := mustLimit(t, algorithms.TokenBucket, 2, time.Minute, 0)
	charge := func(key string, l *algorithms.Limit, cost int64) store.Charge {
		return store.Charge{Key: []byte(key), Limit: l, Cost: cost}
	}

	tests := []struct {
		name          string
		charges       []store.Charge
		wantCodes     []algorithms.Code
		wantRemaining []int64
		// remaining of "wide" and "narrow" afterwards, by peeking
		wantWide, wantNarrow int64
	}{
		{
			name:          "both admitted, both charged",
			charges:       []store.Charge{charge("wide", ten, 1), charge("narrow", two, 1)},
			wantCodes:     []algorithms.Code{algorithms.Allowed, algorithms.Allowed},
			wantRemaining: []int64{9, 1},
			wantWide:      9, wantNarrow: 1,
		},
		{
			name:          "one denied, neither charged; the admissible one reports what it holds",
			charges:       []store.Charge{charge("wide", ten, 1), charge("narrow", two, 3)},
			wantCodes:     []algorithms.Code{algorithms.Allowed, algorithms.OverCapacity},
			wantRemaining: []int64{10, 2},
			wantWide:      10, wantNarrow: 2,
		},
		{
			name: "shadow denial does not block the other",
			charges: []store.Charge{charge("wide", ten, 1),
				{Key: []byte("narrow"), Limit: two, Cost: 3, Shadow: true}},
			wantCodes:     []algorithms.Code{algorithms.Allowed, algorithms.OverCapacity},
			wantRemaining: []int64{9, 2},
			wantWide:      9, wantNarrow: 2,
		},
		{
			name:          "peeks charge nothing",
			charges:       []store.Charge{charge("wide", ten, 0), charge("narrow", two, 0)},
			wantCodes:     []algorithms.Code{algorithms.Allowed, algorithms.Allowed},
			wantRemaining: []int64{10, 2},
			wantWide:      10, wantNarrow: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(clock.NewFake(t0), WithShards(2))
			got := apply(t, s, tt.charges...)
			for i := range got {
				if got[i].Code != tt.wantCodes[i] || got[i].Remaining != tt.wantRemaining[i] {
					t.Errorf("charge %d: got %v remaining %d, want %v remaining %d",
						i, got[i].Code, got[i].Remaining, tt.wantCodes[i], tt.wantRemaining[i])
				}
			}
			after := apply(t, s, charge("wide", ten, 0), charge("narrow", two, 0))
			if after[0].Remaining != tt.wantWide || after[1].Remaining != tt.wantNarrow {
				t.Errorf("afterwards wide=%d narrow=%d, want %d %d",
					after[0].Remaining, after[1].Remaining, tt.wantWide, tt.wantNarrow)
			}
		})
	}
}

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
		d := apply(t, s, store.Charge{Key: a, Limit: wide, Cost: 1}, store.Charge{Key: b, Limit: narrow, Cost: 1})
		if d[0].Code == algorithms.Allowed && d[1].Code == algorithms.Allowed {
			admitted++
		}
	}
	if admitted != 7 {
		t.Fatalf("admitted %d requests, want 7", admitted)
	}
	if d := apply(t, s, store.Charge{Key: a, Limit: wide}); d[0].Remaining != 93 {
		t.Fatalf("wide bucket has %d remaining, want 93 (charged only by admitted requests)", d[0].Remaining)
	}
}

// TestConcurrentOneKey: 64 goroutines hammer one key; exactly the bound
// is admitted.
func TestConcurrentOneKey(t *testing.T) {
	for _, alg := range algorithms.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			s := New(clock.NewFake(t0))
			l := mustLimit(t, alg, 500, time.Hour, 0)
			other := mustLimit(t, algorithms.FixedWindow, 1_000_000, time.Hour, 0)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					own := []byte(fmt.Sprintf("own-%d", g))
					for range 20 {
						// Half the calls also charge a per-goroutine key, so
						// the multi-shard path runs concurrently too.
						charges := []store.Charge{{Key: []byte("shared"), Limit: l, Cost: 1}}
						if g%2 == 0 {
							charges = append(charges, store.Charge{Key: own, Limit: other, Cost: 1})
						}
						d := make([]algorithms.Decision, len(charges))
						if err := s.Apply(context.Background(), charges, d); err != nil {
							t.Error(err)
							return
						}
						if d[0].Code == algorithms.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 500 {
				t.Fatalf("admitted %d of 1280, want exactly 500", got)
			}
		})
	}
}

func TestBoundedAndReclaimed(t *testing.T) {
	c := clock.NewFake(t0)
	s := New(c, WithShards(4), WithMaxBuckets(100))
	l := mustLimit(t, algorithms.TokenBucket, 1, time.Second, 0)
	for i := range 1000 {
		apply(t, s, store.Charge{Key: []byte(fmt.Sprintf("key-%d", i)), Limit: l, Cost: 1})
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
		apply(t, s, store.Charge{Key: []byte(fmt.Sprintf("new-%d", i)), Limit: l, Cost: 1})
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
	d := apply(t, s, store.Charge{Key: []byte("k"), Limit: l, Cost: 0})
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
		charges := []store.Charge{{Limit: l, Cost: 1}}
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
		charges := []store.Charge{{Limit: l, Cost: 1}}
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
	a := store.Charge{Key: []byte("a"), Limit: hundred, Cost: 1}
	b := store.Charge{Key: []byte("b"), Limit: five, Cost: 5}
	apply(t, s, b)
	c.Advance(61 * time.Second) // b is back at rest, still held

	apply(t, s, a, b)
	peekA := apply(t, s, store.Charge{Key: a.Key, Limit: hundred})[0]
	peekB := apply(t, s, store.Charge{Key: b.Key, Limit: five})[0]
	if peekA.Remaining != 99 || peekB.Remaining != 0 {
		t.Fatalf("after charging a (1 of 100) and b (5 of 5): a has %d remaining, b %d; want 99 and 0",
			peekA.Remaining, peekB.Remaining)
	}
	if d := apply(t, s, store.Charge{Key: b.Key, Limit: five, Cost: 1})[0]; d.Code != algorithms.Denied {
		t.Fatalf("b admitted a sixth hit in its window: %+v", d)
	}
}
