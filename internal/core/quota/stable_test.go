package quota_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

// TestSteadyDemandSameAssignment: ten clients asking 50..500 of a limit of
// 1000 per second, their demands wobbling by ±1% (less than the tolerance
// of 2.5% between any two), are each sent the identical assignment at every report once the
// shares have settled, and nothing is pushed (Envoy keeps a token bucket
// only when the new assignment equals the old); a change of demand is
// then answered by one new assignment per client whose share moves.
func TestSteadyDemandSameAssignment(t *testing.T) {
	limit := quota.Limit{Requests: 1000, Period: time.Second}
	a := quota.New(time.Second)
	clk := clock.NewFake(t0)
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%d", i)
	}
	last := map[string]quota.Assignment{}
	changes := map[string]int{}
	round := func(demand func(i, r int) uint64, r int) {
		clk.Advance(time.Second)
		for i, id := range ids {
			as, _, pushes := a.Report("b", limit, id, demand(i, r), time.Second, clk.Now())
			for _, p := range append(pushes, quota.Push{Client: id, Assignment: as}) {
				if p.Assignment != last[p.Client] {
					changes[p.Client]++
				}
				last[p.Client] = p.Assignment
			}
		}
		for _, p := range a.Tick(clk.Now()) {
			if p.Assignment != last[p.Client] {
				changes[p.Client]++
			}
			last[p.Client] = p.Assignment
		}
	}
	// Demand i asks 50(i+1) per second, ±1% by turns.
	wobble := func(base func(i int) uint64) func(i, r int) uint64 {
		return func(i, r int) uint64 { return base(i) * uint64(100+(r%2)-(r+i)%2) / 100 }
	}
	first := wobble(func(i int) uint64 { return 50 * uint64(i+1) })
	for r := range 3 { // settle
		round(first, r)
	}
	clear(changes)
	for r := range 20 {
		round(first, r)
	}
	for _, id := range ids {
		if changes[id] != 0 {
			t.Errorf("%s: %d new assignments under steady demand (holds %+v)", id, changes[id], last[id])
		}
	}
	// The two largest drop to 50: every other client's share grows, each
	// once, as the shrunk ones' larger shares are delivered.
	clear(changes)
	second := wobble(func(i int) uint64 { return map[bool]uint64{true: 50, false: 50 * uint64(i+1)}[i >= 8] })
	for r := range 20 {
		round(second, r)
	}
	fair := quota.MaxMinFair(1000, []int64{50, 100, 150, 200, 250, 300, 350, 400, 50, 50})
	for i, id := range ids {
		if d := last[id].Share - fair[i]; d*40 > fair[i] || -d*40 > fair[i] {
			t.Errorf("%s: share %d, max-min fair %d", id, last[id].Share, fair[i])
		}
		if changes[id] > 1 {
			t.Errorf("%s: %d new assignments for one change of demand", id, changes[id])
		}
	}
}

// TestReturningClientGetsItsHeldShare: a client whose share is still held
// (its stream ended, or its bucket was retired, and its last assignment
// has not expired) gets it back at once when it reports again: growing it
// up to what it may still apply commits nothing more.
func TestReturningClientGetsItsHeldShare(t *testing.T) {
	limit := quota.Limit{Requests: 600, Period: time.Minute}
	a := quota.New(time.Second)
	clk := clock.NewFake(t0)
	held := steady(a, clk, limit, map[string]int64{"a": 6000, "b": 6000}, 3)
	if held["a"] != 300 || held["b"] != 300 {
		t.Fatalf("held %v, want 300 each", held)
	}
	a.Gone("b", "a", clk.Now())
	a.Tick(clk.Now()) // a's 300 is held until its assignment expires
	clk.Advance(time.Second)
	if as, _, _ := a.Report("b", limit, "a", 100, time.Second, clk.Now()); as.Share != 300 {
		t.Fatalf("a, back while its 300 is held: %d, want 300 at once", as.Share)
	}
}
