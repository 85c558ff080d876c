package memory

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// snapT0 is the decision clock's and the wall clock's reading when the
// snapshot tests write, a whole minute so that windows start there.
const snapT0 = int64(1_767_225_600) * int64(time.Second)

// bucketCase is one bucket to drain before a restart.
type bucketCase struct {
	name  string
	limit *algorithms.Limit
	// cost charged repeatedly at snapT0 until denied.
	cost int64
}

func bucketCases(t testing.TB) []bucketCase {
	return []bucketCase{
		{"token_bucket", storetest.MustLimit(t, algorithms.TokenBucket, 600, time.Minute, 800), 1},
		{"sliding_window", storetest.MustLimit(t, algorithms.SlidingWindow, 100, 10*time.Second, 0), 1},
		{"fixed_window", storetest.MustLimit(t, algorithms.FixedWindow, 5, time.Minute, 0), 1},
		{"leaky_bucket_queue", storetest.MustLimit(t, algorithms.LeakyBucketQueue, 10, time.Second, 4), 1},
		{"token_bucket_cost_3", storetest.MustLimit(t, algorithms.TokenBucket, 7, 3*time.Second, 9), 3},
		{"concurrency", storetest.MustLimit(t, algorithms.Concurrency, 5, 30*time.Second, 0), 1},
	}
}

func charge(key string, l *algorithms.Limit, cost int64) store.Charge {
	return store.Charge{Domain: storetest.Domain, Key: []byte(key), Limit: l, Cost: cost}
}

// drain charges each case's bucket at the clock's now until it is denied.
func drain(t testing.TB, s *Store, cases []bucketCase) {
	for _, c := range cases {
		for i := 0; ; i++ {
			if storetest.Apply(t, s, charge(c.name, c.limit, c.cost))[0].Code != algorithms.Allowed {
				break
			}
			if i > 10_000 {
				t.Fatalf("%s: never denied", c.name)
			}
		}
	}
}

func writeRead(t testing.TB, s *Store, path string, wall int64) *snapshot.Snapshot {
	t.Helper()
	w, err := s.WriteSnapshot(path, wall)
	if err != nil {
		t.Fatal(err)
	}
	if w.Buckets != s.Len() {
		t.Fatalf("wrote %d buckets of %d", w.Buckets, s.Len())
	}
	snap, err := snapshot.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// A store restored from a snapshot after a downtime decides every request
// exactly as the store that wrote it would have, had it run through the
// downtime: the time passes by itself, as states are times on a clock
// that counts from the Unix epoch.
func TestRestoreDecidesAsIfNeverStopped(t *testing.T) {
	for _, down := range []time.Duration{0, time.Millisecond, 2 * time.Second, 7 * time.Second, 59 * time.Second} {
		t.Run(down.String(), func(t *testing.T) {
			cases := bucketCases(t)
			oldClock := clock.NewFake(snapT0)
			old := New(oldClock)
			drain(t, old, cases)
			snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)

			newClock := clock.NewFake(snapT0 + int64(down))
			restarted := New(newClock)
			r := restarted.Restore(snap, snapT0+int64(down), nil)
			if r.Buckets+r.AtRest != len(cases) || r.Dropped+r.Full+r.Present != 0 || r.Lag != 0 {
				t.Fatalf("Restore = %+v, want every bucket restored or at rest", r)
			}
			oldClock.Set(snapT0 + int64(down))
			// Ask both, step by step, through the next minute and a half.
			for step := 0; step < 90; step++ {
				for _, c := range cases {
					want := storetest.Apply(t, old, charge(c.name, c.limit, c.cost))[0]
					got := storetest.Apply(t, restarted, charge(c.name, c.limit, c.cost))[0]
					if got != want {
						t.Fatalf("%s, %v after the restart: restored store decides %+v, the old one %+v",
							c.name, time.Duration(newClock.Now()-snapT0), got, want)
					}
				}
				oldClock.Advance(time.Second + 3*time.Millisecond)
				newClock.Advance(time.Second + 3*time.Millisecond)
			}
		})
	}
}

// The same caller is still denied right after the restart, with a
// retry_after that comes true: denied 1ns before it, admitted at it.
func TestRestoredDenialRetryAfterComesTrue(t *testing.T) {
	for _, c := range bucketCases(t) {
		t.Run(c.name, func(t *testing.T) {
			old := New(clock.NewFake(snapT0))
			drain(t, old, []bucketCase{c})
			snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)
			const down = 30 * time.Millisecond
			fc := clock.NewFake(snapT0 + int64(down))
			s := New(fc)
			s.Restore(snap, snapT0+int64(down), nil)
			d := storetest.Apply(t, s, charge(c.name, c.limit, c.cost))[0]
			if d.Code != algorithms.Denied || d.RetryAfter <= 0 {
				t.Fatalf("after the restart: %+v, want denied with a retry_after", d)
			}
			at := fc.Now() + int64(d.RetryAfter)
			fc.Set(at - 1)
			if d := storetest.Apply(t, s, charge(c.name, c.limit, c.cost))[0]; d.Code == algorithms.Allowed {
				t.Fatalf("admitted 1ns before retry_after")
			}
			fc.Set(at)
			if d := storetest.Apply(t, s, charge(c.name, c.limit, c.cost))[0]; d.Code != algorithms.Allowed {
				t.Fatalf("denied at retry_after: %+v", d)
			}
		})
	}
}

func TestRestoreSkips(t *testing.T) {
	fast := storetest.MustLimit(t, algorithms.TokenBucket, 10, time.Second, 1) // at rest 100ms after a charge
	slow := storetest.MustLimit(t, algorithms.TokenBucket, 1, time.Hour, 1)
	old := New(clock.NewFake(snapT0))
	for _, c := range []store.Charge{charge("fast", fast, 1), charge("slow", slow, 1), charge("gone", slow, 1), charge("held", slow, 1)} {
		storetest.Apply(t, old, c)
	}
	snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)
	if snap.Len() != 4 {
		t.Fatalf("snapshot of %d buckets, want 4", snap.Len())
	}

	later := snapT0 + int64(time.Second)
	s := New(clock.NewFake(later), WithMaxBuckets(2))
	storetest.Apply(t, s, charge("held", slow, 0)) // a peek stores nothing
	storetest.Apply(t, s, charge("held", fast, 1)) // the store's own, newer state
	var asked []string
	r := s.Restore(snap, later, func(key []byte, st algorithms.State, version int) ([]byte, algorithms.State, bool) {
		asked = append(asked, string(key))
		if version != snapshot.Version {
			t.Errorf("adopt asked about version %d, want %d", version, snapshot.Version)
		}
		return key, st, string(key) != "gone"
	})
	want := Restored{Buckets: 1, AtRest: 1, Dropped: 1, Present: 1}
	if r != want {
		t.Fatalf("Restore = %+v, want %+v", r, want)
	}
	if len(asked) != 3 {
		t.Errorf("adopt asked about %q; buckets at rest need no asking", asked)
	}
	if s.Len() != 2 {
		t.Errorf("the store holds %d buckets, want 2", s.Len())
	}
	if d := storetest.Apply(t, s, charge("slow", slow, 1))[0]; d.Code != algorithms.Denied {
		t.Errorf("the restored bucket admits: %+v", d)
	}
	if d := storetest.Apply(t, s, charge("held", fast, 1))[0]; d.Code != algorithms.Denied {
		t.Errorf("the store's own state was replaced by the snapshot's: %+v", d)
	}

	// A full store restores nothing more.
	full := New(clock.NewFake(later), WithMaxBuckets(1))
	storetest.Apply(t, full, charge("other", slow, 1))
	if r := full.Restore(snap, later, nil); r.Buckets != 0 || r.Full != 3 {
		t.Errorf("Restore into a full store = %+v, want 3 full", r)
	}
}

// The wall clock was stepped while the old process ran, so its decision
// clock disagreed with the wall clock when it wrote. Behind: the states
// are moved later, or a drained bucket would come back full. Ahead: the
// states are kept as they are, stricter than the truth, never lenient.
func TestRestoreAcrossAClockStep(t *testing.T) {
	tb := storetest.MustLimit(t, algorithms.TokenBucket, 600, time.Minute, 800)
	for _, tc := range []struct {
		name    string
		skew    time.Duration // the old decision clock minus the wall clock
		wantLag time.Duration
	}{
		{"old clock an hour behind", -time.Hour, time.Hour},
		{"old clock a second behind", -time.Second, time.Second},
		{"old clock 50ms behind: below MinLag, left alone", -50 * time.Millisecond, 50 * time.Millisecond},
		{"old clock in step", 0, 0},
		{"old clock an hour ahead", time.Hour, -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldNow := snapT0 + int64(tc.skew)
			oldClock := clock.NewFake(oldNow)
			old := New(oldClock)
			drain(t, old, []bucketCase{{"k", tb, 1}})
			snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)

			const down = 3 * time.Second
			fc := clock.NewFake(snapT0 + int64(down)) // a new process: clock = wall
			s := New(fc)
			r := s.Restore(snap, snapT0+int64(down), nil)
			if r.Lag != tc.wantLag || r.Buckets != 1 {
				t.Fatalf("Restore = %+v, want the bucket restored with lag %v", r, tc.wantLag)
			}
			// 3s of real time refilled 30 tokens; a clock that ran ahead
			// is not undone (the bucket stays stricter), one that ran
			// behind is.
			d := storetest.Apply(t, s, charge("k", tb, 1))[0]
			if tc.skew > 0 {
				if d.Code != algorithms.Denied {
					t.Fatalf("after 3s down: %+v, want still denied", d)
				}
				return
			}
			if tc.wantLag > 0 && tc.wantLag <= MinLag {
				// Not moved: the state decides as the old store's does at
				// the same reading, 50ms more lenient than the truth.
				oldClock.Set(snapT0 + int64(down))
				if want := storetest.Apply(t, old, charge("k", tb, 1))[0]; d != want {
					t.Fatalf("lag below MinLag: %+v, want %+v (the state as written)", d, want)
				}
				return
			}
			if d.Code != algorithms.Allowed || d.Remaining != 29 {
				t.Fatalf("after 3s down: %+v, want 30 tokens refilled (29 left after this one)", d)
			}
		})
	}
}

func TestWriteSnapshotLeavesBucketsAtRestOut(t *testing.T) {
	fc := clock.NewFake(snapT0)
	s := New(fc)
	l := storetest.MustLimit(t, algorithms.TokenBucket, 10, time.Second, 1)
	storetest.Apply(t, s, charge("a", l, 1))
	fc.Advance(50 * time.Millisecond)
	storetest.Apply(t, s, charge("b", l, 1))
	fc.Advance(60 * time.Millisecond) // a at rest (100ms), b not
	w, err := s.WriteSnapshot(filepath.Join(t.TempDir(), "state"), fc.Now())
	if err != nil {
		t.Fatal(err)
	}
	if w.Buckets != 1 || w.Bytes <= 0 {
		t.Errorf("wrote %+v, want one bucket", w)
	}
	if _, err := s.WriteSnapshot(filepath.Join(t.TempDir(), "missing", "state"), fc.Now()); err == nil {
		t.Error("a snapshot into a missing directory succeeded")
	}
}

// Snapshots taken while requests are decided: the race detector watches,
// every file reads back, and no decision is lost.
func TestWriteSnapshotWhileDeciding(t *testing.T) {
	s := New(clock.NewMonotonic(), WithShards(16))
	l := storetest.MustLimit(t, algorithms.TokenBucket, 1_000_000, time.Second, 1_000_000)
	path := filepath.Join(t.TempDir(), "state")
	var stop atomic.Bool
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := make([]algorithms.Decision, 2)
			for i := 0; !stop.Load() && i < 200_000; i++ {
				cs := []store.Charge{charge(fmt.Sprintf("g%d-%d", g, i%500), l, 1), charge(fmt.Sprintf("shared-%d", i%7), l, 1)}
				if err := s.Apply(context.Background(), cs, d); err != nil {
					t.Error(err)
					return
				}
				if d[0].Code == algorithms.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	for range 20 {
		if _, err := s.WriteSnapshot(path, time.Now().UnixNano()); err != nil {
			t.Fatal(err)
		}
		if _, err := snapshot.Read(path); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if admitted.Load() == 0 {
		t.Fatal("nothing was decided during the snapshots")
	}
}

// Buckets of long keys, which the store keeps under a digest keyed by its
// own random seed, come back in a new store: it takes the snapshot's seed.
// A store that already holds buckets cannot, and drops them.
func TestRestoreDigestedKeys(t *testing.T) {
	l := storetest.MustLimit(t, algorithms.TokenBucket, 1, time.Hour, 1)
	long := strings.Repeat("a long key past MaxVerbatimKey ", 4)
	if len(long) <= MaxVerbatimKey {
		t.Fatal("the long key is not long")
	}
	old := New(clock.NewFake(snapT0))
	storetest.Apply(t, old, charge(long, l, 1))
	storetest.Apply(t, old, charge("short", l, 1))
	snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)

	var asked []string
	s := New(clock.NewFake(snapT0))
	r := s.Restore(snap, snapT0, func(key []byte, st algorithms.State, _ int) ([]byte, algorithms.State, bool) {
		asked = append(asked, string(key))
		return key, st, true
	})
	if r.Buckets != 2 {
		t.Fatalf("Restore = %+v, want both buckets", r)
	}
	if len(asked) != 1 || asked[0] != "short" {
		t.Errorf("adopt was asked about %q; only the verbatim key can be checked", asked)
	}
	for _, k := range []string{long, "short"} {
		if d := storetest.Apply(t, s, charge(k, l, 1))[0]; d.Code != algorithms.Denied {
			t.Errorf("%.10s… after the restore: %+v, want denied", k, d)
		}
	}

	busy := New(clock.NewFake(snapT0))
	storetest.Apply(t, busy, charge("other", l, 1))
	if r := busy.Restore(snap, snapT0, nil); r.Buckets != 1 || r.Dropped != 1 {
		t.Errorf("Restore into a store with buckets and its own seed = %+v, want the short key only", r)
	}
	if d := storetest.Apply(t, busy, charge(long, l, 1))[0]; d.Code != algorithms.Allowed {
		t.Errorf("the long key in the busy store: %+v, want a fresh bucket", d)
	}
}

// A version 1 file kept long keys under SHA-256 digests, which no store
// computes any more: an upgraded store restores its other buckets, drops
// those (a long key starts over rather than miss its bucket for ever, or
// land in another's), and keeps a secret seed of its own rather than the
// file's zero one.
func TestRestoreVersion1(t *testing.T) {
	l := storetest.MustLimit(t, algorithms.TokenBucket, 1, time.Hour, 1)
	long := strings.Repeat("a long key past MaxVerbatimKey ", 4)
	old := New(clock.NewFake(snapT0))
	storetest.Apply(t, old, charge(long, l, 1))
	storetest.Apply(t, old, charge("short", l, 1))
	path := filepath.Join(t.TempDir(), "state")
	if _, err := old.WriteSnapshot(path, snapT0); err != nil {
		t.Fatal(err)
	}
	// The same records as version 1 wrote them: the version, a 32-byte
	// seed of the digest of that version, and records without domains.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	now, err := snapshot.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	v1 := append(bytes.Clone(data[:8]), 1, 0, 0, 0)
	v1 = append(v1, data[12:32]...)
	v1 = append(v1, bytes.Repeat([]byte{0xa5}, 32)...)
	for b := range now.All() {
		v1 = binary.AppendUvarint(v1, uint64(len(b.Key)))
		v1 = append(v1, b.Key...)
		v1, _ = b.State.AppendBinary(v1)
	}
	body := len(v1) - 64
	v1 = binary.LittleEndian.AppendUint64(v1, uint64(now.Len()))
	v1 = binary.LittleEndian.AppendUint64(v1, uint64(body))
	v1 = binary.LittleEndian.AppendUint32(v1, crc32.Checksum(v1, crc32.MakeTable(crc32.Castagnoli)))
	snap, err := snapshot.Decode(append(v1, "END\n"...))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != 1 || snap.Len() != 2 {
		t.Fatalf("read version %d with %d buckets, want version 1 with 2", snap.Version, snap.Len())
	}

	s := New(clock.NewFake(snapT0))
	seed := s.keySeed
	if r := s.Restore(snap, snapT0, nil); r.Buckets != 1 || r.Dropped != 1 {
		t.Errorf("Restore of a version 1 file = %+v, want the short key restored and the digested one dropped", r)
	}
	if s.keySeed != seed {
		t.Errorf("the store took the seed %x of a version 1 file; it keeps its own", s.keySeed)
	}
	if d := storetest.Apply(t, s, charge("short", l, 1))[0]; d.Code != algorithms.Denied {
		t.Errorf("the short key after the restore: %+v, want denied (its bucket came back spent)", d)
	}
	if d := storetest.Apply(t, s, charge(long, l, 1))[0]; d.Code != algorithms.Allowed {
		t.Errorf("the long key after the restore: %+v, want a fresh bucket", d)
	}
	if s.Len() != 2 {
		t.Errorf("holds %d buckets, want 2 (the short key's, and the long key's new one)", s.Len())
	}
}

// Buckets in debt survive a restart: after an overdraft charge of three
// times their capacity, a snapshot and a downtime shorter than the debt,
// the restored store denies checks and charges exactly as the store that
// wrote it, with the same waits, through the debt being paid back and a
// refund, until the bucket is at rest.
func TestRestoreBucketsInDebt(t *testing.T) {
	for _, c := range bucketCases(t) {
		t.Run(c.name, func(t *testing.T) {
			debt := func(kind algorithms.Kind, cost int64) store.Charge {
				ch := charge(c.name, c.limit, cost)
				ch.Kind = kind
				return ch
			}
			oldClock := clock.NewFake(snapT0)
			old := New(oldClock)
			if d := storetest.Apply(t, old, debt(algorithms.Overdraft, 3*c.limit.Capacity()))[0]; d.Code != algorithms.Denied {
				t.Fatalf("an overdraft of three times the capacity: %+v, want denied (in debt)", d)
			}
			snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)
			const down = 500 * time.Millisecond
			newClock := clock.NewFake(snapT0 + int64(down))
			restarted := New(newClock)
			if r := restarted.Restore(snap, snapT0+int64(down), nil); r.Buckets != 1 {
				t.Fatalf("Restore = %+v, want the bucket in debt restored", r)
			}
			oldClock.Set(snapT0 + int64(down))
			if d := storetest.Apply(t, restarted, debt(algorithms.Check, 0))[0]; d.Code != algorithms.Denied {
				t.Fatalf("a check right after the restart: %+v, want denied (in debt)", d)
			}
			// Through the debt and well past it (the buckets' debt takes
			// three capacities' worth of refill).
			steps := []store.Charge{debt(algorithms.Check, 0), debt(algorithms.Admit, c.cost), debt(algorithms.Check, 0), debt(algorithms.Refund, 1), debt(algorithms.Overdraft, 1)}
			var checks [2]int
			for step := range 200 {
				ch := steps[step%len(steps)]
				want := storetest.Apply(t, old, ch)[0]
				got := storetest.Apply(t, restarted, ch)[0]
				if got != want {
					t.Fatalf("%v of %d, %v after the restart: restored store decides %+v, the old one %+v",
						ch.Kind, ch.Cost, time.Duration(newClock.Now()-snapT0), got, want)
				}
				if ch.Kind == algorithms.Check {
					checks[min(want.Code, algorithms.Denied)]++
				}
				oldClock.Advance(c.limit.Period() / 7)
				newClock.Advance(c.limit.Period() / 7)
			}
			if checks[algorithms.Allowed] == 0 || checks[algorithms.Denied] == 0 {
				t.Errorf("checks allowed, denied: %v; want both, in debt and after it", checks)
			}
		})
	}
}

// A restored bucket counts in its own domain's fair share, as the file
// records it, so that after a restart a flood still evicts only the
// flooding domain's buckets.
func TestRestoreKeepsDomains(t *testing.T) {
	l := storetest.MustLimit(t, algorithms.TokenBucket, 1, time.Hour, 1)
	long := strings.Repeat("a long key past MaxVerbatimKey ", 4) // kept as a digest
	old := New(clock.NewFake(snapT0))
	storetest.Apply(t, old, store.Charge{Domain: "billing", Key: []byte(long), Limit: l, Cost: 1})
	for i := range 8 {
		storetest.Apply(t, old, store.Charge{Domain: "shop", Key: fmt.Appendf(nil, "shop-%d", i), Limit: l, Cost: 1})
	}
	snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)

	s := New(clock.NewFake(snapT0), WithShards(1), WithMaxBuckets(9))
	if r := s.Restore(snap, snapT0, nil); r.Buckets != 9 {
		t.Fatalf("Restore = %+v, want 9 buckets", r)
	}
	for i := range 100 {
		storetest.Apply(t, s, store.Charge{Domain: "shop", Key: fmt.Appendf(nil, "flood-%d", i), Limit: l, Cost: 1})
	}
	if d := storetest.Apply(t, s, store.Charge{Domain: "billing", Key: []byte(long), Limit: l, Cost: 1})[0]; d.Code != algorithms.Denied {
		t.Errorf("billing's restored bucket after shop's flood: %v, want still denied", d.Code)
	}
}

// A concurrency's units, written by a decision clock an hour behind the
// wall, are restored moved an hour later: still held after the restart,
// each until its lease (and less than a sixth of it more) on the new
// clock, and no longer.
func TestRestoreConcurrencyAcrossAClockStep(t *testing.T) {
	l := storetest.MustLimit(t, algorithms.Concurrency, 2, 10*time.Minute, 0)
	old := New(clock.NewFake(snapT0 - int64(time.Hour)))
	for range 2 {
		if d := storetest.Apply(t, old, charge("k", l, 1))[0]; d.Code != algorithms.Allowed {
			t.Fatalf("charging: %+v", d)
		}
	}
	snap := writeRead(t, old, filepath.Join(t.TempDir(), "state"), snapT0)
	fc := clock.NewFake(snapT0 + int64(3*time.Second))
	s := New(fc)
	if r := s.Restore(snap, snapT0+int64(3*time.Second), nil); r.Lag != time.Hour || r.Buckets != 1 {
		t.Fatalf("Restore = %+v, want the bucket restored with lag 1h", r)
	}
	d := storetest.Apply(t, s, charge("k", l, 1))[0]
	if d.Code != algorithms.Denied || d.Remaining != 0 {
		t.Fatalf("after the restart: %+v, want both units still held", d)
	}
	// Two units, not more: one released leaves one place, taken again.
	release := charge("k", l, 1)
	release.Kind = algorithms.Refund
	if d := storetest.Apply(t, s, release)[0]; d.Remaining != 1 {
		t.Fatalf("a release after the restart: %+v, want 1 place free", d)
	}
	if d := storetest.Apply(t, s, charge("k", l, 1))[0]; d.Code != algorithms.Allowed || d.Remaining != 0 {
		t.Fatalf("charging the place again: %+v", d)
	}
	// Charged at the wall's snapT0 (the old clock's snapT0-1h, moved), the
	// units expire no sooner than 10m after it, and less than 100s later.
	fc.Set(snapT0 + int64(10*time.Minute) - 1)
	if d := storetest.Apply(t, s, charge("k", l, 1))[0]; d.Code != algorithms.Denied {
		t.Fatalf("1ns before the lease: %+v, want denied", d)
	}
	fc.Set(snapT0 + int64(10*time.Minute+100*time.Second))
	if d := storetest.Apply(t, s, charge("k", l, 2))[0]; d.Code != algorithms.Allowed {
		t.Fatalf("a slot after the lease: %+v, want both units back", d)
	}
}
