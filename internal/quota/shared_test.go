package quota_test

import (
	"slices"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/quota"
)

// grant answers claims as the ledger would for one daemon whose others'
// grants add up to othersGrant and whose clients' demands are others.
func grant(claims []quota.Claim, othersGrant int64, others ...int64) []quota.Grant {
	gs := make([]quota.Grant, len(claims))
	for i, c := range claims {
		gs[i] = quota.Grant{Grant: max(min(c.Want, c.Limit-othersGrant), c.Keep, 0), Others: others}
	}
	return gs
}

// TestSharedWaitsForTheLedger: a shared allocator answers no report
// before the ledger has granted the bucket; the claim then carries the
// client's demand, and the tick after the grant pushes the client its
// share — of the limit divided max-min fairly with the other daemons'
// clients, and no more than the grant.
func TestSharedWaitsForTheLedger(t *testing.T) {
	limit := quota.Limit{Requests: 6000, Period: period}
	a := quota.NewShared(interval)
	clk := clock.NewFake(t0)
	if _, ok, pushes := a.Report("b", limit, "c1", 100, interval, clk.Now()); ok || len(pushes) != 0 {
		t.Fatalf("a report answered (%v, pushes %v) before the ledger granted anything", ok, pushes)
	}
	if p := a.Tick(clk.Now()); len(p) != 0 {
		t.Fatalf("pushes before the ledger answered: %+v", p)
	}
	claims := a.Claims(clk.Now())
	if len(claims) != 1 || claims[0].Keep != 0 || !slices.Equal(claims[0].Demands, []int64{6000}) || claims[0].Limit != 6000 {
		t.Fatalf("claims %+v, want one for b keeping 0 with the demand 6000", claims)
	}
	// The other daemons' one client asks 2000; they hold 1000.
	if claims[0].Want != 6000 {
		t.Fatalf("want %d, want 6000 (the others' demands not known yet)", claims[0].Want)
	}
	a.SetPools(claims, grant(claims, 1000, 2000), clk.Now())
	pushes := a.Tick(clk.Now())
	if len(pushes) != 1 || pushes[0].Client != "c1" || pushes[0].Share != 4000 {
		t.Fatalf("pushes %+v, want c1 with 4000 (6000 max-min fair with the others' 2000)", pushes)
	}
	// The others hold 3000 now: c1's target is still 4000, but the grant
	// it claims next is limited to what they leave.
	clk.Advance(interval)
	as, ok, _ := a.Report("b", limit, "c1", 100, interval, clk.Now())
	if !ok || as.Share != 4000 {
		t.Fatalf("c1's report: %+v, %v; want 4000", as, ok)
	}
	claims = a.Claims(clk.Now())
	if len(claims) != 1 || claims[0].Keep != 4000 || claims[0].Want != 4000 {
		t.Fatalf("claims %+v, want keep = want = 4000", claims)
	}
}

// TestSharedGrowsOnlyOutOfItsGrant: the others' demands fall, the target
// rises, and the share grows only as far as the ledger grants; while a
// claim is in flight the grant in force is its keep.
func TestSharedGrowsOnlyOutOfItsGrant(t *testing.T) {
	limit := quota.Limit{Requests: 6000, Period: period}
	a := quota.NewShared(interval)
	clk := clock.NewFake(t0)
	a.Report("b", limit, "c1", 100, interval, clk.Now())
	claims := a.Claims(clk.Now())
	a.SetPools(claims, grant(claims, 3000, 6000), clk.Now())
	if p := a.Tick(clk.Now()); len(p) != 1 || p[0].Share != 3000 {
		t.Fatalf("pushes %+v, want c1 with 3000 (half, the others asking 6000)", p)
	}
	// The others' demand falls to 1000: c1's target is 5000, its want too.
	claims = a.Claims(clk.Now())
	if len(claims) != 0 {
		t.Fatalf("claims with nothing new: %+v", claims)
	}
	clk.Advance(interval)
	a.Report("b", limit, "c1", 100, interval, clk.Now())
	claims = a.Claims(clk.Now())
	a.SetPools(claims, grant(claims, 3000, 1000), clk.Now()) // they still hold 3000
	claims = a.Claims(clk.Now())
	if len(claims) != 1 || claims[0].Want != 5000 || claims[0].Keep != 3000 {
		t.Fatalf("claims %+v, want keep 3000, want 5000", claims)
	}
	// In flight: a report grows nothing.
	if as, ok, _ := a.Report("b", limit, "c1", 100, interval, clk.Now()); !ok || as.Share != 3000 {
		t.Fatalf("while the claim is in flight c1 got %+v", as)
	}
	a.SetPools(claims, grant(claims, 1500, 1000), clk.Now()) // they freed 1500
	if p := a.Tick(clk.Now()); len(p) != 1 || p[0].Share != 4500 {
		t.Fatalf("pushes %+v, want c1 grown to its grant, 4500", p)
	}
}

// TestSharedStopsRenewing: when the ledger is not reached, assignments are
// sent only while the grant holds for their whole life; a report that
// cannot be answered is answered, by a push, once the grant is renewed.
func TestSharedStopsRenewing(t *testing.T) {
	limit := quota.Limit{Requests: 6000, Period: period}
	a := quota.NewShared(interval)
	clk := clock.NewFake(t0)
	a.Report("b", limit, "c1", 100, interval, clk.Now())
	claims := a.Claims(clk.Now())
	if claims[0].Lease != interval*7/4+quota.LeaseSlack {
		t.Fatalf("lease %v, want an assignment's life (1.75 intervals) and the slack", claims[0].Lease)
	}
	a.SetPools(claims, grant(claims, 0), clk.Now())
	a.Tick(clk.Now())
	until := t0 + int64(claims[0].Lease)
	clk.Set(until - int64(interval*7/4)) // the last instant an assignment's life fits
	if _, ok, _ := a.Report("b", limit, "c1", 100, interval, clk.Now()); !ok {
		t.Fatal("the report at the grant's last instant was not answered")
	}
	clk.Advance(1)
	if _, ok, _ := a.Report("b", limit, "c1", 100, interval, clk.Now()); ok {
		t.Fatal("a report answered with an assignment that outlives the grant")
	}
	claims = a.Claims(clk.Now())
	if len(claims) != 1 {
		t.Fatalf("claims %+v, want the renewal", claims)
	}
	a.SetPools(claims, grant(claims, 0), clk.Now())
	if p := a.Tick(clk.Now()); len(p) != 1 || p[0].Client != "c1" || p[0].Share != 6000 {
		t.Fatalf("pushes %+v, want c1's answer, 6000", p)
	}
}

// TestSharedReleases: a bucket whose clients are gone and whose shares
// have expired is removed from the ledger by the next claims.
func TestSharedReleases(t *testing.T) {
	limit := quota.Limit{Requests: 6000, Period: period}
	a := quota.NewShared(interval)
	clk := clock.NewFake(t0)
	a.Report("b", limit, "c1", 100, interval, clk.Now())
	claims := a.Claims(clk.Now())
	a.SetPools(claims, grant(claims, 0), clk.Now())
	a.Tick(clk.Now())
	a.Gone("b", "c1", clk.Now())
	clk.Advance(2 * interval)
	a.Tick(clk.Now())
	claims = a.Claims(clk.Now())
	if len(claims) != 1 || claims[0].Bucket != "b" || claims[0].Lease != 0 || claims[0].Keep != 0 || claims[0].Want != 0 {
		t.Fatalf("claims %+v, want b's removal", claims)
	}
	if claims = a.Claims(clk.Now()); len(claims) != 0 {
		t.Fatalf("claims %+v after the removal, want none", claims)
	}
}
