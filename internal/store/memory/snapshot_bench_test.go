package memory

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// benchKey is a key as the engine makes them for the default policy's
// per-user-per-endpoint rule, 76 bytes (domain, path, user, limit key): a
// long key, which the store keeps as its 16-byte digest.
func benchKey(b []byte, i int) []byte {
	part := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b = part(b[:0], "default")
	b = part(b, "path")
	b = part(b, fmt.Sprintf("/api/v1/orders/%d", i%1000))
	b = part(b, "user")
	b = part(b, fmt.Sprintf("user-%07d", i))
	return part(b, "token_bucket/1/1h0m0s/800")
}

// filled returns a store of n buckets, none at rest, on a clock that is
// read live (so that snapshots and decisions take the real time they take).
func filled(b *testing.B, n int) (*Store, *algorithms.Limit) {
	b.Helper()
	s := New(clock.NewMonotonic(), WithMaxBuckets(n+1024), WithMaxBytes(1<<40))
	l := storetest.MustLimit(b, algorithms.TokenBucket, 1, time.Hour, 800) // at rest an hour after a charge
	var key []byte
	d := make([]algorithms.Decision, 1)
	for i := range n {
		key = benchKey(key, i)
		if err := s.Apply(context.Background(), []store.Charge{{Domain: "default", Key: key, Limit: l, Cost: 1}}, d); err != nil {
			b.Fatal(err)
		}
	}
	if s.Len() != n {
		b.Fatalf("filled %d buckets, want %d", s.Len(), n)
	}
	return s, l
}

// BenchmarkSnapshot1M writes and loads a snapshot of a million buckets
// (keys as benchKey makes them).
// Reported: the file's size, the process's CPU time per snapshot or load
// (steadier than wall time on a shared machine), and the longest and the
// mean time one shard was locked for copying.
//
//	go test -run XXX -bench Snapshot1M -benchtime 5x ./internal/store/memory
func BenchmarkSnapshot1M(b *testing.B) {
	const n = 1_000_000
	s, _ := filled(b, n)
	path := filepath.Join(b.TempDir(), "state")
	if _, err := s.WriteSnapshot(path, time.Now().UnixNano()); err != nil {
		b.Fatal(err)
	}
	b.Run("write", func(b *testing.B) {
		var pause, locked time.Duration
		var w Written
		cpu := cpuTime()
		for b.Loop() {
			var err error
			if w, err = s.WriteSnapshot(path, time.Now().UnixNano()); err != nil {
				b.Fatal(err)
			}
			pause, locked = max(pause, w.Pause), locked+w.Locked
		}
		b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
		b.ReportMetric(float64(w.Bytes)/1e6, "MB")
		b.ReportMetric(float64(w.Bytes)/float64(w.Buckets), "B/bucket")
		b.ReportMetric(float64(pause.Microseconds()), "max-pause-µs")
		b.ReportMetric(float64(locked.Microseconds())/float64(b.N*len(s.shards)), "mean-pause-µs")
	})
	b.Run("load", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			snap, err := snapshot.Read(path)
			if err != nil {
				b.Fatal(err)
			}
			fresh := New(clock.NewMonotonic(), WithMaxBuckets(n+1024), WithMaxBytes(1<<40))
			r := fresh.Restore(snap, time.Now().UnixNano(), nil)
			if r.Buckets != n {
				b.Fatalf("restored %+v", r)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
	})
}

// cpuTime returns the CPU time the process has used, user and system: on a
// machine shared with other work, a steadier measure than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecideDuringSnapshot measures single decisions on a store of a
// million buckets, idle and while snapshots are written back to back, and
// reports the 50th, 99th and 99.9th percentile and the largest latency of
// one decision (timed one by one, so each includes a clock read).
//
//	go test -run XXX -bench DecideDuringSnapshot -benchtime 2000000x ./internal/store/memory
func BenchmarkDecideDuringSnapshot(b *testing.B) {
	const n = 1_000_000
	s, l := filled(b, n)
	path := filepath.Join(b.TempDir(), "state")
	for _, during := range []bool{false, true} {
		name := "idle"
		if during {
			name = "snapshotting"
		}
		b.Run(name, func(b *testing.B) {
			var stop atomic.Bool
			var wg sync.WaitGroup
			var snaps atomic.Int64
			if during {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						if _, err := s.WriteSnapshot(path, time.Now().UnixNano()); err != nil {
							b.Error(err)
							return
						}
						snaps.Add(1)
					}
				}()
			}
			lat := make([]time.Duration, 0, b.N)
			var key []byte
			d := make([]algorithms.Decision, 1)
			i := 0
			for b.Loop() {
				key = benchKey(key, (i*7919)%n)
				i++
				start := time.Now()
				_ = s.Apply(context.Background(), []store.Charge{{Domain: "default", Key: key, Limit: l, Cost: 0}}, d)
				lat = append(lat, time.Since(start))
			}
			stop.Store(true)
			wg.Wait()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)].Nanoseconds()) }
			b.ReportMetric(q(0.5), "p50-ns")
			b.ReportMetric(q(0.99), "p99-ns")
			b.ReportMetric(q(0.999), "p99.9-ns")
			b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
			if during {
				b.ReportMetric(float64(snaps.Load()), "snapshots")
			}
		})
	}
}
