package algorithms

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"
)

// A worked timeline on a limit of 3 in flight with a lease of 60s (slots
// of 10s): charges are admitted while in flight + cost ≤ 3, a refund gives
// units back, never below zero, and a unit never released expires with its
// slot, 60s after the slot's last nanosecond.
func TestConcurrencyTimeline(t *testing.T) {
	l := mustLimit(t, Concurrency, 3, time.Minute, 0)
	const s0 = int64(1_767_225_600_000_000_000) // a multiple of 10s
	at := func(d time.Duration) int64 { return s0 + int64(d) }
	steps := []struct {
		name string
		o    Kind
		now  int64
		cost int64
		want Decision
	}{
		{"first unit", Admit, at(2 * sec), 1, Decision{Remaining: 2, ResetAfter: 68*sec - 1}},
		{"two more fill it", Admit, at(15 * sec), 2, Decision{Remaining: 0, ResetAfter: 65*sec - 1}},
		{"full: denied until the first unit's slot expires", Admit, at(20 * sec), 1,
			Decision{Code: Denied, Remaining: 0, ResetAfter: 60*sec - 1, RetryAfter: 50*sec - 1}},
		{"two would wait for the second slot", Admit, at(20 * sec), 2,
			Decision{Code: Denied, Remaining: 0, ResetAfter: 60*sec - 1, RetryAfter: 60*sec - 1}},
		{"more than the limit never fits", Admit, at(20 * sec), 4, Decision{Code: OverCapacity, Remaining: 0, ResetAfter: 60*sec - 1}},
		{"a check is denied too", Check, at(20 * sec), 0, Decision{Code: Denied, Remaining: 0, ResetAfter: 60*sec - 1, RetryAfter: 50*sec - 1}},
		{"a release gives one back", Refund, at(21 * sec), 1, Decision{Remaining: 1, ResetAfter: 59*sec - 1}},
		{"and it is taken again", Admit, at(22 * sec), 1, Decision{Remaining: 0, ResetAfter: 68*sec - 1}},
		{"releases never go below zero", Refund, at(23 * sec), 10, Decision{Remaining: 3}},
		{"a peek of the empty limit", Admit, at(23 * sec), 0, Decision{Remaining: 3}},
		{"a crashed caller's units", Admit, at(30 * sec), 3, Decision{Remaining: 0, ResetAfter: 70*sec - 1}},
		{"still held 1ns before their lease ends", Admit, at(100*sec - 2), 1,
			Decision{Code: Denied, Remaining: 0, ResetAfter: 1, RetryAfter: 1}},
		{"healed after their lease", Admit, at(100*sec - 1), 1, Decision{Remaining: 2, ResetAfter: 60 * sec}},
		{"an overdraft takes units beyond the limit", Overdraft, at(101 * sec), 4,
			Decision{Code: Denied, Remaining: 0, Debt: 2, ResetAfter: 69*sec - 1, RetryAfter: 69*sec - 1}},
	}
	var s State
	for _, st := range steps {
		next, d, err := checkedOp(l, s, st.now, st.o, st.cost)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if d != st.want {
			t.Fatalf("%s: %v of %d at +%v:\n got %+v\nwant %+v", st.name, st.o, st.cost, time.Duration(st.now-s0), d, st.want)
		}
		s = next
	}
}

// A refund releases the oldest units in flight: the unit left is the
// newest, and it lasts its own lease. (Releasing the newest would leave
// the oldest unit's date on a unit that may still be running, and expire
// it before its lease.)
func TestConcurrencyReleasesOldest(t *testing.T) {
	l := mustLimit(t, Concurrency, 2, 6*sec, 0) // slots of 1s
	var s State
	s, _ = l.Decide(s, t0, 1)              // A
	s, _ = l.Decide(s, t0+int64(4*sec), 1) // B
	s, _ = l.Refund(s, t0+int64(5*sec), 1) // A's or B's: the oldest, A's, is released
	// The unit left lasts until B's lease: 6s after B, then the rest of
	// B's slot.
	bEnds := ceilSlot(t0+int64(4*sec), int64(sec)) - 1 + int64(6*sec)
	if _, d := l.Decide(s, bEnds-1, 2); d.Code != Denied {
		t.Fatalf("1ns before B's lease ends, 2 more are admitted: %+v", d)
	}
	if _, d := l.Decide(s, bEnds, 2); d.Code != Allowed {
		t.Fatalf("at B's lease end, 2 more are denied: %+v", d)
	}
}

// ceilSlot rounds t up to the next multiple of g (t itself if it is one,
// plus g: the end of the slot holding t).
func ceilSlot(t, g int64) int64 { return t - t%g + g }

// Against units charged one by one at random times and never released,
// each unit expires no sooner than its lease and less than a sixth of the
// lease later: the count in flight at any now lies between the units
// charged in (now-T, now] and those charged in (now-T-T/6, now].
func TestConcurrencyLeaseBounds(t *testing.T) {
	for _, lease := range []time.Duration{7, 60 * sec, time.Hour + 13, 6 * ns, 1} {
		t.Run(fmt.Sprint(lease), func(t *testing.T) {
			l := mustLimit(t, Concurrency, MaxInFlight, lease, 0)
			rng := newRand(uint64(lease))
			var (
				s       State
				charges []int64
				now     = t0 + rng.Int64N(int64(lease)+1)
			)
			late := (int64(lease) + 5) / 6 // G, the slot
			for range 3000 {
				now += rng.Int64N(int64(lease)/5 + 2)
				var d Decision
				if rng.IntN(3) == 0 {
					s, d = l.Decide(s, now, 1)
					if d.Code != Allowed {
						t.Fatalf("denied with a limit of %d: %+v", MaxInFlight, d)
					}
					charges = append(charges, now)
				} else {
					_, d = l.Decide(s, now, 0)
				}
				var lo, hi int64 // live by the exact lease; charged within lease + G - 1
				for _, c := range charges {
					if now-c < int64(lease) {
						lo++
					}
					if now-c < int64(lease)+late-1 {
						hi++
					}
				}
				if in := MaxInFlight - d.Remaining; in < lo || in > hi {
					t.Fatalf("at %d: %d in flight, want between %d (by the exact lease) and %d (lease + %dns)", now, in, lo, hi, late-1)
				}
			}
		})
	}
}

// Releases are anonymous: a refund releases the oldest units in flight.
// So while others charge and release, a crashed caller's units are taken
// by their releases, and as many of their own units stay, each lasting its
// own lease: in flight stays above what really runs by what crashed until
// charges stop for a lease and a slot. It never falls below what runs.
func TestConcurrencyCrashedUnitsAreCarried(t *testing.T) {
	l := mustLimit(t, Concurrency, 5, 60*sec, 0) // slots of 10s
	var s State
	now := t0 - t0%int64(10*sec)
	s, _ = l.Decide(s, now, 3) // a caller charges 3 and crashes
	var last int64
	for range 300 {
		// Another caller runs one request at a time, each lasting 1s.
		var d Decision
		s, d = l.Decide(s, now, 1)
		if d.Code != Allowed || d.Remaining != 1 {
			t.Fatalf("at +%v: %+v, want admitted with 1 left: 3 carried, 1 running", time.Duration(now-t0), d)
		}
		last = now
		now += int64(sec)
		s, _ = l.Refund(s, now, 1)
	}
	// The last three units charged are the ones left: they expire with
	// the slot of the last charge, a lease after it.
	end := ceilSlot(last, int64(10*sec)) - 1 + int64(60*sec)
	if _, d := l.Decide(s, end-1, 0); d.Remaining != 2 {
		t.Fatalf("1ns before the last charge's lease ends: %+v, want 3 in flight", d)
	}
	if _, d := l.Decide(s, end, 0); d.Remaining != 5 {
		t.Fatalf("at the last charge's lease end: %+v, want none in flight", d)
	}
}

// On random overlapping requests, each shorter than the lease, some of
// them never released, in flight never counts fewer units than are really
// running (releasing the newest would: a long chain of overlapping
// requests would keep the first one's date), and never more than were
// charged within the last lease and slot.
func TestConcurrencyNeverUndercounts(t *testing.T) {
	const lease = int64(60 * sec)
	l := mustLimit(t, Concurrency, MaxInFlight, time.Duration(lease), 0)
	rng := newRand(34)
	type req struct{ start, end int64 } // end 0: crashed
	var (
		s    State
		reqs []req
		now  = t0
	)
	for range 20000 {
		now += rng.Int64N(int64(2 * sec))
		// Release every request that ended by now, in order of its end.
		slices.SortFunc(reqs, func(a, b req) int { return cmp.Compare(a.end, b.end) })
		kept := reqs[:0]
		for _, r := range reqs {
			if r.end != 0 && r.end <= now {
				s, _ = l.Refund(s, r.end, 1)
				continue
			}
			kept = append(kept, r)
		}
		reqs = kept
		n := 1 + rng.Int64N(3)
		var d Decision
		s, d = l.Decide(s, now, n)
		if d.Code != Allowed {
			t.Fatalf("denied: %+v", d)
		}
		for range n {
			r := req{start: now, end: now + 1 + rng.Int64N(lease-1)}
			if rng.IntN(50) == 0 {
				r.end = 0
			}
			reqs = append(reqs, r)
		}
		var running int64
		for _, r := range reqs {
			if r.end != 0 {
				running++
			}
		}
		in := MaxInFlight - d.Remaining
		if in < running {
			t.Fatalf("at %d: %d in flight, but %d requests run", now, in, running)
		}
	}
}

// Later moves a concurrency's expiry, not its counts: the moved state
// holds the same units, each expiring no sooner than d after it would have,
// and less than a slot after that.
func TestConcurrencyLater(t *testing.T) {
	l := mustLimit(t, Concurrency, 5, 10*sec, 0)
	var s State
	now := t0 + 3
	s, _ = l.Decide(s, now, 2)
	s, _ = l.Decide(s, now+int64(4*sec), 1)
	const d = int64(3*sec + 7)
	moved := s.Later(d)
	if g, h := unpackGens(s), unpackGens(moved); g != h {
		t.Fatalf("Later changed the counts: %v, then %v", g, h)
	}
	g := (l.period + 5) / 6
	for at := now; at < now+int64(30*sec); at += int64(time.Millisecond) {
		_, orig := l.Decide(s, at, 0)
		_, late := l.Decide(moved, at+d, 0)
		_, soon := l.Decide(moved, at+d+g, 0)
		if late.Remaining > orig.Remaining || soon.Remaining < orig.Remaining {
			t.Fatalf("at +%v: %d free, moved %d at +d and %d a slot later", time.Duration(at-now), orig.Remaining, late.Remaining, soon.Remaining)
		}
	}
}
