package simulate_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
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
