package quota_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

func TestMaxMinFair(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		demands  []int64
		want     []int64
	}{
		{100, nil, []int64{}},
		{100, []int64{10, 20, 30}, []int64{10, 20, 30}},           // all fit
		{100, []int64{200, 200}, []int64{50, 50}},                 // equal split
		{100, []int64{10, 200, 200}, []int64{10, 45, 45}},         // the small one in full
		{100, []int64{200, 10, 30, 200}, []int64{30, 10, 30, 30}}, // two levels
		{10, []int64{5, 5, 5}, []int64{4, 3, 3}},                  // remainder to the earliest
		{10, []int64{100, 1, 100}, []int64{5, 1, 4}},
		{0, []int64{5, 5}, []int64{0, 0}},
		{-5, []int64{5}, []int64{0}},
		{10, []int64{-3, 20}, []int64{0, 10}},
		{2, []int64{1, 1, 1}, []int64{1, 1, 0}}, // fewer units than clients
	} {
		got := quota.MaxMinFair(tc.capacity, tc.demands)
		if !slices.Equal(got, tc.want) {
			t.Errorf("MaxMinFair(%d, %v) = %v, want %v", tc.capacity, tc.demands, got, tc.want)
		}
	}
}

// TestMaxMinFairProperties: never over capacity or a demand; everything
// handed out when demand exceeds capacity; an unsatisfied demand gets at
// least every other share less one unit.
func TestMaxMinFairProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := r.IntN(20)
		capacity := r.Int64N(1000)
		demands := make([]int64, n)
		var total int64
		for i := range demands {
			demands[i] = r.Int64N(300)
			total += demands[i]
		}
		shares := quota.MaxMinFair(capacity, demands)
		var sum, most int64
		for i, s := range shares {
			if s < 0 || s > demands[i] {
				t.Fatalf("MaxMinFair(%d, %v) = %v: share %d outside [0, %d]", capacity, demands, shares, s, demands[i])
			}
			sum += s
			most = max(most, s)
		}
		if sum != min(capacity, total) {
			t.Fatalf("MaxMinFair(%d, %v) = %v: sum %d, want %d", capacity, demands, shares, sum, min(capacity, total))
		}
		for i, s := range shares {
			if s < demands[i] && s < most-1 {
				t.Fatalf("MaxMinFair(%d, %v) = %v: share %d unsatisfied below the largest %d less one", capacity, demands, shares, s, most)
			}
		}
	}
}

const (
	interval = time.Second
	period   = time.Minute
)

var t0 = time.Unix(1_700_000_040, 0).UnixNano()

// applied models the clients: each applies the last assignment it
// received (delivered at once) until its TTL runs out.
type applied struct {
	share map[string]int64
	until map[string]int64
}

func newApplied() *applied { return &applied{share: map[string]int64{}, until: map[string]int64{}} }

func (m *applied) receive(client string, a quota.Assignment, now int64) {
	m.share[client], m.until[client] = a.Share, now+int64(a.TTL)
}

func (m *applied) total(now int64) int64 {
	var sum int64
	for c, s := range m.share {
		if now < m.until[c] {
			sum += s
		}
	}
	return sum
}

// TestNeverOverLimit: on random timelines of reports (random demands and
// intervals), streams ending and ticks, the shares the clients apply never
// add up to more than the limit, at any instant.
func TestNeverOverLimit(t *testing.T) {
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 7))
		limit := quota.Limit{Requests: 1 + r.Int64N(5000), Period: period}
		a := quota.New(interval)
		clk := clock.NewFake(t0)
		model := newApplied()
		clients := make([]string, 1+r.IntN(30))
		for i := range clients {
			clients[i] = fmt.Sprintf("c%02d", i)
		}
		check := func(step string) {
			if got := model.total(clk.Now()); got > limit.Requests {
				t.Fatalf("seed %d, %s at +%v: clients apply %d > limit %d", seed, step, time.Duration(clk.Now()-t0), got, limit.Requests)
			}
		}
		for range 300 {
			clk.Advance(time.Duration(r.Int64N(int64(interval))))
			now := clk.Now()
			var pushes []quota.Push
			switch c := clients[r.IntN(len(clients))]; r.IntN(10) {
			case 0:
				pushes = a.Gone("b", c, now)
			case 1:
				pushes = a.Tick(now)
			default:
				elapsed := time.Duration(r.Int64N(int64(2 * interval)))
				asked := uint64(r.Int64N(2 * limit.Requests))
				var as quota.Assignment
				as, _, pushes = a.Report("b", limit, c, asked, elapsed, now)
				model.receive(c, as, now)
			}
			for _, p := range pushes {
				model.receive(p.Client, p.Assignment, now)
			}
			check("step")
		}
	}
}

// steady runs clients that report their demands every interval, in order,
// for rounds intervals, delivering every assignment at once; it returns
// the shares they hold at the end.
func steady(a *quota.Allocator, clk *clock.Fake, limit quota.Limit, demands map[string]int64, rounds int) map[string]int64 {
	held := map[string]int64{}
	ids := make([]string, 0, len(demands))
	for id := range demands {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for range rounds {
		clk.Advance(interval)
		for _, id := range ids {
			asked := uint64(demands[id] * int64(interval) / int64(limit.Period))
			as, _, pushes := a.Report("b", limit, id, asked, interval, clk.Now())
			held[id] = as.Share
			for _, p := range pushes {
				held[p.Client] = p.Share
			}
		}
		for _, p := range a.Tick(clk.Now()) {
			held[p.Client] = p.Share
		}
	}
	return held
}

// within10 fails unless every client's share is within 10% of its max-min
// fair share of the limit (at least 1).
func within10(t *testing.T, what string, limit quota.Limit, demands, held map[string]int64) {
	t.Helper()
	ids := make([]string, 0, len(demands))
	ds := []int64{}
	for id := range demands {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ds = append(ds, max(demands[id], 1))
	}
	fair := quota.MaxMinFair(limit.Requests, ds)
	var sum int64
	for i, id := range ids {
		sum += held[id]
		if d := held[id] - fair[i]; d*10 > fair[i] || -d*10 > fair[i] {
			t.Errorf("%s: %s holds %d, its max-min fair share is %d (demand %d)", what, id, held[id], fair[i], ds[i])
		}
	}
	if sum > limit.Requests {
		t.Errorf("%s: shares add up to %d > %d", what, sum, limit.Requests)
	}
}

// TestFairAfterTwoIntervals: whatever the demands, and however they
// change, two report intervals after a change every client holds within
// 10% of its max-min fair share.
func TestFairAfterTwoIntervals(t *testing.T) {
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 11))
		limit := quota.Limit{Requests: 6000 + 60*r.Int64N(1000), Period: period}
		a := quota.New(interval)
		clk := clock.NewFake(t0)
		n := 1 + r.IntN(40)
		demands := map[string]int64{}
		for phase := range 4 {
			for i := range n {
				// skewed: most ask little, a few ask a lot; multiples of 60
				// per minute, whole requests per one-second interval.
				d := 60 * (1 + r.Int64N(limit.Requests/60/int64(n)+1))
				if r.IntN(5) == 0 {
					d = 60 * r.Int64N(limit.Requests/60+1)
				}
				demands[fmt.Sprintf("c%02d", i)] = d
			}
			// The first round reports the new demand, the next two settle.
			held := steady(a, clk, limit, demands, 3)
			within10(t, fmt.Sprintf("seed %d phase %d", seed, phase), limit, demands, held)
		}
	}
}

// TestQuietClientReclaimed: a client that stops reporting, or whose stream
// ends, keeps its share committed until its last assignment expires (its
// TTL, 1.5 intervals rounded up to whole seconds, after it was sent, plus a
// quarter interval for delivery); then the others get it.
func TestQuietClientReclaimed(t *testing.T) {
	limit := quota.Limit{Requests: 6000, Period: period}
	for _, tc := range []struct {
		name string
		gone bool
	}{{"stream ends", true}, {"stops reporting", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := quota.New(interval)
			clk := clock.NewFake(t0)
			held := steady(a, clk, limit, map[string]int64{"a": 6000, "b": 6000}, 3)
			if held["a"] != 3000 || held["b"] != 3000 {
				t.Fatalf("two clients asking for everything hold %v, want 3000 each", held)
			}
			sent := clk.Now() // both reported (and were sent their shares) now
			if tc.gone {
				clk.Advance(interval / 10)
				if p := a.Gone("b", "b", clk.Now()); len(p) != 0 {
					t.Fatalf("b's share went out at once: %v", p)
				}
			}
			expiry := sent + int64(2*time.Second+interval/4)
			// a reports just before b's share expires: it cannot have it yet.
			clk.Set(expiry - 1)
			as, _, _ := a.Report("b", limit, "a", 100, interval, clk.Now())
			if as.Share != 3000 {
				t.Fatalf("before b's assignment expired a got %d, want 3000", as.Share)
			}
			clk.Set(expiry)
			pushes := a.Tick(clk.Now())
			if len(pushes) != 1 || pushes[0].Client != "a" || pushes[0].Share != 6000 {
				t.Fatalf("as b's assignment expired the pushes were %+v, want a with 6000", pushes)
			}
			if v := a.View(clk.Now()); len(v) != 1 || len(v[0].Clients) != 1 {
				t.Fatalf("b is still kept: %+v", v)
			}
		})
	}
}

// TestShrinkHeldUntilDelivered: a share that shrinks is sent at once, and
// the larger one stays committed until the smaller one has reached the
// client (a quarter interval: Envoy replaces its token bucket as it
// arrives), or, if its stream ends first, until the assignment that
// carried the larger one expires; a newcomer gets what is free at once and
// the rest then, in one step.
func TestShrinkHeldUntilDelivered(t *testing.T) {
	limit := quota.Limit{Requests: 600, Period: period}
	for _, gone := range []bool{false, true} {
		a := quota.New(interval)
		clk := clock.NewFake(t0)
		as, _, _ := a.Report("b", limit, "a", 1000, interval, clk.Now())
		if as.Share != 600 || as.Burst != 1 || as.TTL != 2*time.Second {
			t.Fatalf("a alone got %+v, want share 600, burst 1 (600/min × 50ms, rounded down, at least 1), TTL 2s", as)
		}
		clk.Advance(interval / 2)
		nb, _, pushes := a.Report("b", limit, "n", 1000, interval, clk.Now())
		if nb.Share != 0 {
			t.Fatalf("the newcomer got %d while a may still apply all 600", nb.Share)
		}
		if len(pushes) != 1 || pushes[0].Client != "a" || pushes[0].Share != 300 {
			t.Fatalf("pushes %+v, want a shrunk to 300", pushes)
		}
		free := clk.Now() + int64(interval/4) // a has 300 then
		if gone {
			a.Gone("b", "a", clk.Now())
			free = t0 + int64(2*time.Second+interval/4) // its 600 expires then
		}
		clk.Set(free - 1)
		if p := a.Tick(clk.Now()); len(p) != 0 {
			t.Fatalf("gone %v: pushes before a's 600 was free: %+v", gone, p)
		}
		clk.Set(free)
		if p := a.Tick(clk.Now()); len(p) != 1 || p[0].Client != "n" || p[0].Share != 300 {
			t.Fatalf("gone %v: as a's 600 was free the pushes were %+v, want n with 300", gone, p)
		}
	}
}

// TestTTLAndBurst: an assignment's time to live is whole seconds, at
// least 1s and at least 1.5 report intervals; its burst is what its share
// earns in 50ms, at least 1.
func TestTTLAndBurst(t *testing.T) {
	for _, tc := range []struct{ interval, want time.Duration }{
		{0, time.Second}, {100 * time.Millisecond, time.Second}, {time.Second / 2, time.Second},
		{time.Second, 2 * time.Second}, {1500 * time.Millisecond, 3 * time.Second}, {2 * time.Second, 3 * time.Second},
		{10 * time.Second, 15 * time.Second}, {time.Duration(1<<63 - 1), time.Duration(1<<63-1) / time.Second * time.Second},
	} {
		if got := quota.TTL(tc.interval); got != tc.want {
			t.Errorf("TTL(%v) = %v, want %v", tc.interval, got, tc.want)
		}
	}
	for _, tc := range []struct {
		share  int64
		period time.Duration
		want   int64
	}{
		{0, time.Second, 0}, {1, time.Second, 1}, {100, time.Second, 5}, {106, time.Second, 5}, {1000, time.Second, 50},
		{5000, 10 * time.Second, 25}, {600, time.Minute, 1}, {1 << 62, time.Nanosecond, 1<<63 - 1}, {7, 0, 1},
	} {
		if got := quota.Burst(tc.share, tc.period); got != tc.want {
			t.Errorf("Burst(%d, %v) = %d, want %d", tc.share, tc.period, got, tc.want)
		}
	}
}

// TestSmallChangesNotSent: a target within 1/40 of the share does not move
// it.
func TestSmallChangesNotSent(t *testing.T) {
	limit := quota.Limit{Requests: 6000, Period: period}
	a := quota.New(interval)
	clk := clock.NewFake(t0)
	as, _, _ := a.Report("b", limit, "a", 40, interval, clk.Now()) // 2400/min
	if as.Share != 2400 {
		t.Fatalf("share %d, want 2400", as.Share)
	}
	clk.Advance(interval)
	if as, _, _ = a.Report("b", limit, "a", 41, interval, clk.Now()); as.Share != 2400 { // 2460: within 2.5%
		t.Fatalf("share %d after a 2.5%% change, want 2400 kept", as.Share)
	}
	clk.Advance(interval)
	if as, _, _ = a.Report("b", limit, "a", 45, interval, clk.Now()); as.Share != 2700 {
		t.Fatalf("share %d after a 12.5%% change, want 2700", as.Share)
	}
}

// TestDemand: a report's demand is what it asked per period; a report with
// no elapsed time counts as one interval's, and its requests belong to the
// next report's interval; a demand is at least 1 and saturates.
func TestDemand(t *testing.T) {
	limit := quota.Limit{Requests: 1 << 40, Period: period}
	a := quota.New(interval)
	clk := clock.NewFake(t0)
	for _, tc := range []struct {
		asked   uint64
		elapsed time.Duration
		want    int64
	}{
		{1, 0, 60},               // Envoy's first report: one request, "one interval"
		{9, interval, 600},       // 1 + 9 in the first second
		{0, 2 * interval, 1},     // nothing asked: 1
		{7, 7 * time.Second, 60}, // its own interval
		{1 << 62, interval, 1 << 62},
	} {
		clk.Advance(interval)
		a.Report("b", limit, "c", tc.asked, tc.elapsed, clk.Now())
		if got := a.View(clk.Now())[0].Clients[0].Demand; got != tc.want {
			t.Errorf("asked %d in %v: demand %d, want %d", tc.asked, tc.elapsed, got, tc.want)
		}
	}
}
