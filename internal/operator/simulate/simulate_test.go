package simulate_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/operator/simulate"
)

func lanes(t *testing.T, requests int64, period time.Duration, algs ...algorithms.Algorithm) []simulate.Lane {
	t.Helper()
	var out []simulate.Lane
	for _, a := range algs {
		l, err := simulate.NewLane(a, requests, period, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestBoundaryComparison is the comparison of the rate-limiting notes: a
// client sends the whole limit just before a window boundary and again at
// it. A fixed window admits twice its limit within a hundredth of a
// period; the sliding window and the buckets admit the limit once, and so
// does a concurrency whose units are never released.
func TestBoundaryComparison(t *testing.T) {
	const limit = 10
	tr := simulate.Traffic{Pattern: simulate.Boundary, Duration: 2 * time.Minute, Burst: limit, Period: time.Minute}
	res, err := simulate.Run(context.Background(), tr, lanes(t, limit, time.Minute, algorithms.Algorithms()...), time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ admitted, within int }{
		"fixed_window":       {20, 20},
		"sliding_window":     {10, 10},
		"token_bucket":       {10, 10},
		"leaky_bucket":       {10, 10},
		"leaky_bucket_queue": {10, 10},
		"concurrency":        {10, 10}, // never released: each unit holds its place for its lease, a minute and more
	}
	for _, l := range res.Lanes {
		w := want[l.Name]
		if l.Admitted != w.admitted || l.MaxAdmittedIn != w.within || l.Admitted+l.Denied != 2*limit {
			t.Errorf("%s: admitted %d (at most %d within a minute), denied %d; want %d admitted, %d within a minute, of %d",
				l.Name, l.Admitted, l.MaxAdmittedIn, l.Denied, w.admitted, w.within, 2*limit)
		}
	}
}

// TestSteadyAtTheRate: a steady stream of exactly the rate. The fixed
// window and the buckets admit all of it; the sliding window, whose
// estimate weighs the previous window's count, admits (L−1)/L of it once
// the first window has passed.
func TestSteadyAtTheRate(t *testing.T) {
	const limit = 10
	tr := simulate.Traffic{Pattern: simulate.Steady, Rate: limit / 60.0, Duration: 10 * time.Minute}
	res, err := simulate.Run(context.Background(), tr, lanes(t, limit, time.Minute, algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.TokenBucket), time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.Lanes {
		if l.Admitted+l.Denied != 100 {
			t.Fatalf("%s: %d decisions; want 100", l.Name, l.Admitted+l.Denied)
		}
		switch l.Name {
		case "sliding_window":
			// The first minute is admitted whole; each later minute
			// admits L−1 of its L.
			if got, want := l.Admitted, limit+9*(limit-1); got != want {
				t.Errorf("sliding_window admitted %d of 100; want %d", got, want)
			}
		default:
			if l.Admitted != 100 {
				t.Errorf("%s admitted %d of 100; want all", l.Name, l.Admitted)
			}
		}
	}
}

func TestQueueDelays(t *testing.T) {
	tr := simulate.Traffic{Pattern: simulate.Bursts, Burst: 5, Every: time.Minute, Duration: time.Minute}
	l, err := simulate.NewLane(algorithms.LeakyBucketQueue, 5, 5*time.Second, 5)
	if err != nil {
		t.Fatal(err)
	}
	res, err := simulate.Run(context.Background(), tr, []simulate.Lane{l}, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	lr := res.Lanes[0]
	// Five at once into a queue that releases one a second: the fifth
	// waits four seconds.
	if lr.Admitted != 5 || lr.Bins[0].MaxDelay != 4*time.Second {
		t.Errorf("queue: admitted %d, longest delay %v; want 5 and 4s", lr.Admitted, lr.Bins[0].MaxDelay)
	}
	if lr.Bins[0].Remaining != 1 || lr.Bins[4].Remaining != 5 {
		t.Errorf("queue remaining after 1s = %d, after 5s = %d; want 1 and 5", lr.Bins[0].Remaining, lr.Bins[4].Remaining)
	}
}

func TestTrafficPatterns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		traffic simulate.Traffic
		count   int
		wantErr string
	}{
		{"steady", simulate.Traffic{Pattern: simulate.Steady, Rate: 4, Duration: 10 * time.Second}, 40, ""},
		{"bursts", simulate.Traffic{Pattern: simulate.Bursts, Burst: 3, Every: 2 * time.Second, Duration: 10 * time.Second}, 15, ""},
		{"boundary", simulate.Traffic{Pattern: simulate.Boundary, Burst: 7, Period: time.Second, Duration: 2 * time.Second}, 14, ""},
		{"recorded, outside ignored", simulate.Traffic{Pattern: simulate.Recorded, Times: []time.Duration{3, 1, -1, 2, 99}, Duration: 10}, 3, ""},
		{"no duration", simulate.Traffic{Pattern: simulate.Steady, Rate: 1}, 0, "duration"},
		{"no rate", simulate.Traffic{Pattern: simulate.Poisson, Duration: time.Second}, 0, "rate"},
		{"too much", simulate.Traffic{Pattern: simulate.Steady, Rate: 1e9, Duration: time.Hour}, 0, "more than"},
		{"unknown", simulate.Traffic{Pattern: "zipf", Duration: time.Second}, 0, `pattern "zipf"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.traffic.Arrivals()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != tc.count {
				t.Fatalf("%d arrivals, %v; want %d", len(got), err, tc.count)
			}
			for i := 1; i < len(got); i++ {
				if got[i] < got[i-1] {
					t.Fatalf("arrivals not sorted: %v", got)
				}
			}
		})
	}
	// Poisson: the same seed gives the same traffic, about Rate a second.
	p := simulate.Traffic{Pattern: simulate.Poisson, Rate: 100, Duration: 100 * time.Second, Seed: 7}
	a, _ := p.Arrivals()
	b, _ := p.Arrivals()
	if len(a) != len(b) || a[len(a)/2] != b[len(b)/2] || len(a) < 9_000 || len(a) > 11_000 {
		t.Errorf("poisson: %d and %d arrivals; want the same, about 10000", len(a), len(b))
	}
}

func TestCSVAndSVG(t *testing.T) {
	tr := simulate.Traffic{Pattern: simulate.Boundary, Duration: 2 * time.Minute, Burst: 10, Period: time.Minute}
	res, err := simulate.Run(context.Background(), tr, lanes(t, 10, time.Minute, algorithms.FixedWindow, algorithms.TokenBucket), 10*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := res.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+2*12 || strings.Join(rows[0], ",") != "t_seconds,lane,admitted,denied,remaining,max_delay_seconds,in_debt" {
		t.Fatalf("CSV: %d rows, header %v; want 25 rows and the documented header", len(rows), rows[0])
	}
	// The bin at 50s holds the burst before the boundary, at 60s the one at it.
	if r := rows[1+5]; strings.Join(r[:4], ",") != "50,fixed_window,10,0" {
		t.Errorf("fixed_window at 50s: %v", r)
	}
	if r := rows[1+12+6]; strings.Join(r[:4], ",") != "60,token_bucket,0,10" {
		t.Errorf("token_bucket at 60s: %v", r)
	}
	svg := res.SVG()
	for _, want := range []string{`<svg xmlns="http://www.w3.org/2000/svg"`, `data-lane="fixed_window" data-admitted="20"`, `data-lane="token_bucket" data-admitted="10"`, "at most 20 admitted within 1m", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

// TestRunStopsWithItsContext: a simulation stops when its context ends,
// with the context's error; more lanes than MaxLanes are refused.
func TestRunStopsWithItsContext(t *testing.T) {
	tr := simulate.Traffic{Pattern: simulate.Steady, Rate: 1000, Duration: time.Minute}
	ls := lanes(t, 10, time.Minute, algorithms.TokenBucket)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := simulate.Run(ctx, tr, ls, 0, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, %v; want context.Canceled", res, err)
	}
	many := make([]simulate.Lane, simulate.MaxLanes+1)
	for i := range many {
		many[i] = ls[0]
	}
	if _, err := simulate.Run(context.Background(), tr, many, 0, 0); err == nil || !strings.Contains(err.Error(), "lanes: 9; at most 8") {
		t.Errorf("%d lanes: %v", len(many), err)
	}
}

// TestTokenBudgetInDebt: a budget of 1000 tokens a minute, requests of 300
// tokens each second. Charged after the fact (Overdraft), the fourth
// request of each minute is admitted with 100 left and takes the budget 200
// into debt, which denies the rest of the minute; charged up front, the
// fourth does not fit, and the budget is never in debt.
func TestTokenBudgetInDebt(t *testing.T) {
	tr := simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: 3 * time.Minute, Cost: 300}
	budget := lanes(t, 1000, time.Minute, algorithms.FixedWindow, algorithms.FixedWindow)
	budget[0].Overdraft = true
	res, err := simulate.Run(context.Background(), tr, budget, 10*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ admitted, debtBins int }{{12, 15}, {9, 0}} {
		l := res.Lanes[i]
		debt := 0
		for j, b := range l.Bins {
			if b.InDebt {
				debt++
				if j%6 == 5 || b.Remaining != 0 {
					t.Errorf("lane %d: bin %d (ending at a window's end, or with %d remaining) in debt", i, j, b.Remaining)
				}
			}
		}
		if l.Admitted != want.admitted || l.Denied != 180-want.admitted || debt != want.debtBins {
			t.Errorf("lane %d: admitted %d, denied %d, %d bins in debt; want %d, %d, %d", i, l.Admitted, l.Denied, debt, want.admitted, 180-want.admitted, want.debtBins)
		}
	}
	var csvOut bytes.Buffer
	if err := res.WriteCSV(&csvOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(csvOut.String(), "\n0,fixed_window,4,6,0,0,1\n") {
		t.Errorf("CSV lacks the first bin in debt:\n%s", csvOut.String()[:200])
	}
	if svg := res.SVG(); !strings.Contains(svg, `data-debt-bins="15"`) || !strings.Contains(svg, `class="debt"`) {
		t.Errorf("the chart does not show the debt")
	}
}

// concurrencyModel decides a concurrency lane's traffic by its definition,
// unit by unit: a unit charged at c lives until it is released or until
// its lease ends (lease after the last nanosecond of c's slot of
// ceil(lease/6), slots aligned to 0); a charge of cost is admitted iff
// the live units plus cost are at most limit; a release gives back the
// live units that expire first, the oldest. It returns, per bin of width
// bin, the admitted, the denied and what is left at the bin's end, and the
// releases made.
func concurrencyModel(arrivals []time.Duration, limit, cost int64, lease, hold time.Duration, unreleased float64, duration, bin time.Duration) (admitted, denied []int, remaining []int64, released int) {
	g := (lease + 5) / 6
	var units []time.Duration // expiries, in charge order (so ascending)
	var releases []time.Duration
	live := func(now time.Duration) {
		for len(units) > 0 && units[0] <= now {
			units = units[1:]
		}
	}
	releaseUntil := func(now time.Duration, inclusive bool) {
		for len(releases) > 0 && (releases[0] < now || inclusive && releases[0] == now) {
			live(releases[0])
			units = units[min(cost, int64(len(units))):]
			releases = releases[1:]
			released++
		}
	}
	k, next := 0, 0
	for end := bin; end-bin < duration; end += bin {
		a, d := 0, 0
		for ; next < len(arrivals) && arrivals[next] < end; next++ {
			at := arrivals[next]
			releaseUntil(at, true)
			live(at)
			if int64(len(units))+cost > limit {
				d++
				continue
			}
			a++
			k++
			for range cost {
				units = append(units, at-at%g+g-1+lease)
			}
			if hold > 0 && !(math.Floor(float64(k)*unreleased) > math.Floor(float64(k-1)*unreleased)) {
				releases = append(releases, at+hold)
			}
		}
		releaseUntil(end, false)
		live(end)
		admitted, denied, remaining = append(admitted, a), append(denied, d), append(remaining, limit-int64(len(units)))
	}
	return admitted, denied, remaining, released
}

// TestConcurrencyHold: a concurrency lane holds each admitted request's
// cost for Traffic.Hold and then releases it, but for the Unreleased
// fraction, whose units only their lease frees — exactly as a model of
// the definition says, bin by bin. Requests that all release keep the
// lane admitting at the rate its holds allow; requests that never release
// fill it until their lease heals it.
func TestConcurrencyHold(t *testing.T) {
	const lease = 10 * time.Second
	for _, c := range []struct {
		name      string
		tr        simulate.Traffic
		limit     int64
		wantAdmit int
		wantFreed int
	}{
		{"each releases before the next", simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: 30 * time.Second, Hold: 1500 * time.Millisecond}, 2, 30, 29},
		{"holds longer than the limit allows", simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: 30 * time.Second, Hold: 2500 * time.Millisecond}, 2, -1, -1},
		{"one in four never releases", simulate.Traffic{Pattern: simulate.Steady, Rate: 2, Duration: 2 * time.Minute, Hold: time.Second, Unreleased: 0.25}, 3, -1, -1},
		{"none released: the lease heals", simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: time.Minute}, 2, -1, 0},
		{"bursts of cost 2, half unreleased", simulate.Traffic{Pattern: simulate.Bursts, Burst: 4, Every: 3 * time.Second, Duration: time.Minute, Hold: 2 * time.Second, Unreleased: 0.5, Cost: 2}, 5, -1, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := simulate.NewLane(algorithms.Concurrency, c.limit, lease, 0)
			if err != nil {
				t.Fatal(err)
			}
			const bin = 500 * time.Millisecond
			res, err := simulate.Run(context.Background(), c.tr, []simulate.Lane{l}, bin, 0)
			if err != nil {
				t.Fatal(err)
			}
			arrivals, _ := c.tr.Arrivals()
			admitted, denied, remaining, released := concurrencyModel(arrivals, c.limit, max(c.tr.Cost, 1), lease, c.tr.Hold, c.tr.Unreleased, c.tr.Duration, bin)
			lr := res.Lanes[0]
			for i, b := range lr.Bins {
				if b.Admitted != admitted[i] || b.Denied != denied[i] || b.Remaining != remaining[i] {
					t.Fatalf("bin %d (from %v): admitted %d, denied %d, remaining %d; the model: %d, %d, %d",
						i, b.Start, b.Admitted, b.Denied, b.Remaining, admitted[i], denied[i], remaining[i])
				}
			}
			if lr.Released != released {
				t.Errorf("released %d, the model %d", lr.Released, released)
			}
			if c.wantAdmit >= 0 && lr.Admitted != c.wantAdmit {
				t.Errorf("admitted %d, want %d", lr.Admitted, c.wantAdmit)
			}
			if c.wantFreed >= 0 && lr.Released != c.wantFreed {
				t.Errorf("released %d, want %d", lr.Released, c.wantFreed)
			}
			if lr.Admitted == 0 || lr.Denied == 0 && c.wantAdmit < 0 {
				t.Errorf("admitted %d, denied %d: the case shows nothing", lr.Admitted, lr.Denied)
			}
		})
	}
}

// TestConcurrencyNoneReleasedHeals: requests that never release fill a
// concurrency lane, which admits again only when their lease ends: a
// request a second under a limit of 2 and a 6s lease (slots of 1s) admits
// 2, then 2 more each time the lease of the last two has ended.
func TestConcurrencyNoneReleasedHeals(t *testing.T) {
	l, err := simulate.NewLane(algorithms.Concurrency, 2, 6*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr := simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: 30 * time.Second}
	res, err := simulate.Run(context.Background(), tr, []simulate.Lane{l}, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Slots of 1s: units charged at 0 and 1 expire at 6.999999999s and
	// 7.999999999s, so the requests at 7 and 8 are admitted, and so on.
	var got []time.Duration
	for _, b := range res.Lanes[0].Bins {
		if b.Admitted > 0 {
			got = append(got, b.Start)
		}
	}
	want := []time.Duration{0, time.Second, 7 * time.Second, 8 * time.Second, 14 * time.Second, 15 * time.Second, 21 * time.Second, 22 * time.Second, 28 * time.Second, 29 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("admitted at %v, want %v", got, want)
	}
}

func TestHoldInvalid(t *testing.T) {
	for _, c := range []struct {
		tr   simulate.Traffic
		want string
	}{
		{simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: time.Second, Hold: -1}, "hold:"},
		{simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: time.Second, Hold: 1, Unreleased: 1.5}, "unreleased:"},
		{simulate.Traffic{Pattern: simulate.Steady, Rate: 1, Duration: time.Second, Hold: 1, Unreleased: math.NaN()}, "unreleased:"},
	} {
		if _, err := c.tr.Arrivals(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.tr, err, c.want)
		}
	}
}
