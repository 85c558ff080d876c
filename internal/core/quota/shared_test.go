package quota_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

// grant answers claims as the ledger would for one daemon while the other
// daemons' grants add up to othersGrant and their clients ask others.
func grant(claims []quota.Claim, othersGrant int64, others ...int64) []quota.Grant {
	gs := make([]quota.Grant, len(claims))
	for i, c := range claims {
		gs[i] = quota.Grant{Grant: max(min(c.Want, c.Limit-othersGrant), c.Keep, 0), Others: others}
	}
	return gs
}

// tick is a daemon's tick at now: its claims, answered by grant, then the
// allocator's Tick.
func tick(a *quota.Allocator, now, othersGrant int64, others ...int64) ([]quota.Claim, []quota.Push) {
	claims := a.Claims(now)
	a.SetPools(claims, grant(claims, othersGrant, others...), now)
	return claims, a.Tick(now)
}

// answer is the two ticks that answer a report: the claim that publishes
// its demand (nothing is sent after it), then the full claim, whose
// claims and pushes it returns.
func answer(t *testing.T, a *quota.Allocator, now, othersGrant int64, others ...int64) ([]quota.Claim, []quota.Push) {
	t.Helper()
	if _, p := tick(a, now, othersGrant, others...); len(p) != 0 {
		t.Fatalf("pushes after the claim that publishes the reports: %+v", p)
	}
	return tick(a, now, othersGrant, others...)
}

// sharedLimit is what the tests' clients share: 6000 per minute.
var sharedLimit = quota.Limit{Requests: 6000, Period: period}

// reported returns a shared allocator and its clock, after client c1's
// first report of bucket b, asking for everything.
func reported() (*quota.Allocator, *clock.Fake) {
	a := quota.NewShared(interval)
	clk := clock.NewFake(t0)
	a.Report("b", sharedLimit, "c1", 100, interval, clk.Now())
	return a, clk
}

// TestSharedAnswersAfterTheLedger: a shared allocator answers a report in
// two ticks: the first publishes the client's demand and grows nothing,
// the second claims its target, computed on the other daemons' demands
// from the first answer, and sends the share: of the limit divided
// max-min fairly among the clients of every daemon, no more than the grant.
func TestSharedAnswersAfterTheLedger(t *testing.T) {
	limit := quota.Limit{Requests: 6000, Period: period}
	a := quota.NewShared(interval)
	clk := clock.NewFake(t0)
	if _, ok, pushes := a.Report("b", limit, "c1", 100, interval, clk.Now()); ok || len(pushes) != 0 {
		t.Fatalf("a report answered at once (%v, pushes %v)", ok, pushes)
	}
	if p := a.Tick(clk.Now()); len(p) != 0 {
		t.Fatalf("pushes before the ledger answered: %+v", p)
	}
	// The other daemons hold 1000; their one client asks 2000.
	claims, _ := tick(a, clk.Now(), 1000, 2000)
	if len(claims) != 1 || claims[0].Keep != 0 || claims[0].Want != 0 || !slices.Equal(claims[0].Demands, []int64{6000}) {
		t.Fatalf("claims %+v, want b's demand 6000 published: keep 0, want 0", claims)
	}
	claims, pushes := tick(a, clk.Now(), 1000, 2000)
	if len(claims) != 1 || claims[0].Keep != 0 || claims[0].Want != 4000 {
		t.Fatalf("claims %+v, want b's full claim: keep 0, want 4000 (max-min fair with the others' 2000)", claims)
	}
	if len(pushes) != 1 || pushes[0].Client != "c1" || pushes[0].Share != 4000 {
		t.Fatalf("pushes %+v, want c1 with 4000", pushes)
	}
	// Next interval: the others hold 3000 now, and ask 2000: c1's target
	// stays 4000, and it keeps it (its clients may apply it).
	clk.Advance(interval)
	a.Report("b", limit, "c1", 100, interval, clk.Now())
	claims, pushes = answer(t, a, clk.Now(), 3000, 2000)
	if len(claims) != 1 || claims[0].Keep != 4000 || claims[0].Want != 4000 {
		t.Fatalf("claims %+v, want keep = want = 4000", claims)
	}
	if len(pushes) != 1 || pushes[0].Client != "c1" || pushes[0].Share != 4000 {
		t.Fatalf("pushes %+v, want c1's answer, 4000", pushes)
	}
}

// TestSharedGrowsOnlyOutOfItsGrant: when the others' demand falls the
// target rises, and the share grows only as far as the ledger grants;
// while a claim is in flight its grant in force is what its clients may
// already apply.
func TestSharedGrowsOnlyOutOfItsGrant(t *testing.T) {
	a, clk := reported()
	if _, p := answer(t, a, clk.Now(), 3000, 6000); len(p) != 1 || p[0].Share != 3000 {
		t.Fatalf("pushes %+v, want c1 with 3000 (half: the others ask 6000)", p)
	}
	if claims := a.Claims(clk.Now()); len(claims) != 0 {
		t.Fatalf("claims with nothing new: %+v", claims)
	}
	// Half an interval on, b is claimed again, news or not: the others'
	// demand has fallen to 1000, but they still hold 3000.
	clk.Advance(interval / 2)
	if claims, p := tick(a, clk.Now(), 3000, 1000); len(claims) != 1 || len(p) != 0 {
		t.Fatalf("claims %+v, pushes %+v: want b claimed, nothing pushed", claims, p)
	}
	claims := a.Claims(clk.Now())
	if len(claims) != 1 || claims[0].Want != 5000 || claims[0].Keep != 3000 {
		t.Fatalf("claims %+v, want keep 3000, want 5000", claims)
	}
	if p := a.Tick(clk.Now()); len(p) != 0 { // in flight: nothing grows
		t.Fatalf("pushes while the claim is in flight: %+v", p)
	}
	a.SetPools(claims, grant(claims, 1500, 1000), clk.Now()) // they freed 1500
	if p := a.Tick(clk.Now()); len(p) != 1 || p[0].Share != 4500 {
		t.Fatalf("pushes %+v, want c1 grown to its grant, 4500 (short of its target: waiting would not help)", p)
	}
}

// TestSharedStopsRenewing: while the ledger is not reached, a client
// reporting every interval is renewed its share as long as the last grant
// holds for an assignment's whole life, and no more; a report then is
// answered once the ledger answers again.
func TestSharedStopsRenewing(t *testing.T) {
	a, clk := reported()
	claims, _ := answer(t, a, clk.Now(), 0)
	life := int64(quota.TTL(interval) + interval/4)
	if claims[0].Lease != time.Duration(life)+quota.LeaseSlack {
		t.Fatalf("lease %v, want an assignment's life (its TTL, 2s, and a quarter interval) and the slack", claims[0].Lease)
	}
	until := clk.Now() + int64(claims[0].Lease) // the last grant's
	for {
		clk.Advance(interval)
		a.Report("b", sharedLimit, "c1", 100, interval, clk.Now())
		a.Claims(clk.Now()) // lost, both
		a.Tick(clk.Now())
		a.Claims(clk.Now())
		p := a.Tick(clk.Now())
		if clk.Now()+life > until {
			if len(p) != 0 {
				t.Fatalf("%v after the grant: an assignment that outlives it: %+v", time.Duration(clk.Now()-t0), p)
			}
			break
		}
		if len(p) != 1 || p[0].Share != 6000 {
			t.Fatalf("%v after the grant, which holds: pushes %+v, want c1's renewal, 6000", time.Duration(clk.Now()-t0), p)
		}
	}
	if _, p := tick(a, clk.Now(), 0); len(p) != 1 || p[0].Client != "c1" || p[0].Share != 6000 {
		t.Fatalf("pushes %+v once the ledger answers, want c1's answer, 6000", p)
	}
	// (the claim made then was a full claim: the report's news had been
	// published by the lost one)
}

// TestSharedReleases: a bucket whose clients are gone and whose shares
// have expired is removed from the ledger by the next claims.
func TestSharedReleases(t *testing.T) {
	a, clk := reported()
	answer(t, a, clk.Now(), 0)
	a.Gone("b", "c1", clk.Now())
	clk.Advance(quota.TTL(interval) + interval/4)
	a.Tick(clk.Now())
	claims := a.Claims(clk.Now())
	if len(claims) != 1 || claims[0].Bucket != "b" || claims[0].Lease != 0 || claims[0].Keep != 0 || claims[0].Want != 0 {
		t.Fatalf("claims %+v, want b's removal", claims)
	}
	if claims = a.Claims(clk.Now()); len(claims) != 0 {
		t.Fatalf("claims %+v after the removal, want none", claims)
	}
}
