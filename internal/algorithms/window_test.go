package algorithms

import (
	"testing"
	"time"
)

func TestFixedWindow(t *testing.T) {
	tests := []struct {
		name     string
		requests int64
		period   time.Duration
		steps    []step
	}{{
		name: "10 per minute", requests: 10, period: time.Minute,
		steps: []step{
			{at: 0, cost: 0, want: allowed(10, 0)},
			{at: 0, cost: 4, want: allowed(6, time.Minute)},
			{at: 30 * sec, cost: 6, want: allowed(0, 30*sec)},
			{at: 30 * sec, cost: 1, want: denied(0, 30*sec, 30*sec)},
			{at: time.Minute - ns, cost: 1, want: denied(0, ns, ns)},
			{at: time.Minute - ns, cost: 11, want: overCapacity(0, ns)},
			// The count starts over at the window's end.
			{at: time.Minute, cost: 0, want: allowed(10, 0)},
			{at: time.Minute, cost: 10, want: allowed(0, time.Minute)},
			{at: 90 * sec, cost: 0, want: allowed(0, 30*sec)},
			// Back into the previous window: still this window and its count.
			{at: 30 * sec, cost: 1, want: denied(0, 90*sec, 90*sec)},
			{at: 30 * sec, cost: 0, want: allowed(0, 90*sec)},
			{at: 2 * time.Minute, cost: 1, want: allowed(9, time.Minute)},
			{at: 2*time.Minute + 10*year, cost: 1, want: allowed(9, time.Minute)},
		},
	}, {
		// Windows align to multiples of the period since the epoch, not to
		// the first request: t0 is a multiple of 7s, the first request
		// comes 3s later and its window ends 4s after it.
		name: "aligned to the epoch", requests: 2, period: 7 * sec,
		steps: []step{
			{at: 3 * sec, cost: 2, want: allowed(0, 4*sec)},
			{at: 7*sec - ns, cost: 1, want: denied(0, ns, ns)},
			{at: 7 * sec, cost: 2, want: allowed(0, 7*sec)},
		},
	}, {
		name: "1 per day", requests: 1, period: day,
		steps: []step{
			{at: 12 * time.Hour, cost: 1, want: allowed(0, 12*time.Hour)},
			{at: day - ns, cost: 1, want: denied(0, ns, ns)},
			{at: day, cost: 1, want: allowed(0, day)},
		},
	}, {
		name: "1e9 per second", requests: 1e9, period: sec,
		steps: []step{
			{at: 0, cost: 1e9, want: allowed(0, sec)},
			{at: sec - ns, cost: 1, want: denied(0, ns, ns)},
			{at: sec, cost: 1e9 + 1, want: overCapacity(1e9, 0)},
			{at: sec, cost: 1, want: allowed(1e9-1, sec)},
		},
	}, {
		name: "MaxSpan at MaxTime", requests: MaxRequests, period: MaxSpan,
		steps: []step{
			{at: time.Duration(MaxTime - t0), cost: MaxRequests, want: allowed(0, ns)},
			{at: time.Duration(MaxTime - t0), cost: 1, want: denied(0, ns, ns)},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, mustLimit(t, FixedWindow, tt.requests, tt.period, 0), tt.steps)
		})
	}
}

func TestSlidingWindow(t *testing.T) {
	tests := []struct {
		name     string
		requests int64
		period   time.Duration
		steps    []step
	}{{
		// At 66s the previous window's 10 weigh 10·54/60 = 9; at 72s 8; at
		// 78s 7. RetryAfter is when the weight has decayed enough.
		name: "10 per minute", requests: 10, period: time.Minute,
		steps: []step{
			{at: 0, cost: 0, want: allowed(10, 0)},
			{at: 0, cost: 10, want: allowed(0, 2*time.Minute)},
			{at: 59 * sec, cost: 1, want: denied(0, 61*sec, 7*sec)},
			{at: 66*sec - ns, cost: 1, want: denied(0, 54*sec+ns, ns)},
			{at: 66 * sec, cost: 1, want: allowed(0, 114*sec)},
			{at: 72 * sec, cost: 0, want: allowed(1, 108*sec)},
			{at: 72 * sec, cost: 2, want: denied(1, 108*sec, 6*sec)},
			{at: 78 * sec, cost: 2, want: allowed(0, 102*sec)},
			// The next window: the 3 of the last one weigh 3 at first.
			{at: 2 * time.Minute, cost: 0, want: allowed(7, time.Minute)},
			{at: 2 * time.Minute, cost: 11, want: overCapacity(7, time.Minute)},
			{at: 3*time.Minute - ns, cost: 10, want: denied(9, ns, ns)},
			{at: 3 * time.Minute, cost: 10, want: allowed(0, 2*time.Minute)},
			// Back into an earlier window: this window, the previous count at
			// full weight. The next window has room for 1 once 10·(60-e)/60
			// ≤ 9, at e = 6s.
			{at: 150 * sec, cost: 1, want: denied(0, 150*sec, 96*sec)},
			{at: 150 * sec, cost: 0, want: allowed(0, 150*sec)},
			{at: 4 * time.Minute, cost: 0, want: allowed(0, time.Minute)},
			{at: 3*time.Minute + 10*year, cost: 1, want: allowed(9, 2*time.Minute)},
		},
	}, {
		// Back from the window [1m, 2m) to 30s: settled at 1m, where the
		// previous window's 5 weigh in full.
		name: "clock going back with a previous count", requests: 10, period: time.Minute,
		steps: []step{
			{at: 0, cost: 5, want: allowed(5, 2*time.Minute)},
			{at: time.Minute, cost: 3, want: allowed(2, 2*time.Minute)},
			{at: 30 * sec, cost: 0, want: allowed(2, 150*sec)},
			{at: 30 * sec, cost: 2, want: allowed(0, 150*sec)},
			{at: 30 * sec, cost: 1, want: denied(0, 150*sec, 42*sec)},
			{at: 72 * sec, cost: 1, want: allowed(0, 108*sec)},
		},
	}, {
		// When cost is the whole limit, it waits for both windows to empty.
		name: "cost = limit", requests: 4, period: sec,
		steps: []step{
			{at: 500 * ms, cost: 1, want: allowed(3, 1500*ms)},
			{at: 600 * ms, cost: 4, want: denied(3, 1400*ms, 1400*ms)},
			{at: sec, cost: 4, want: denied(3, sec, sec)},
			{at: 2 * sec, cost: 4, want: allowed(0, 2*sec)},
		},
	}, {
		name: "1 per day", requests: 1, period: day,
		steps: []step{
			{at: 0, cost: 1, want: allowed(0, 2*day)},
			{at: day, cost: 1, want: denied(0, day, day)},
			{at: 36 * time.Hour, cost: 1, want: denied(0, 12*time.Hour, 12*time.Hour)},
			{at: 2 * day, cost: 1, want: allowed(0, 2*day)},
		},
	}, {
		name: "1e9 per second", requests: 1e9, period: sec,
		steps: []step{
			{at: 0, cost: 1e9, want: allowed(0, 2*sec)},
			// 1e9 weigh 1e9·(1e9-e)/1e9 = 1e9 - e, exactly.
			{at: sec + 250*ms, cost: 0, want: allowed(250e6, 750*ms)},
			{at: sec + 250*ms, cost: 250e6 + 1, want: denied(250e6, 750*ms, ns)},
			{at: sec + 250*ms, cost: 250e6, want: allowed(0, 1750*ms)},
		},
	}, {
		name: "longest period at MaxTime", requests: MaxRequests, period: MaxSpan / 2,
		steps: []step{
			{at: time.Duration(MaxTime - t0), cost: MaxRequests, want: allowed(0, MaxSpan/2+ns)},
			{at: time.Duration(MaxTime - t0), cost: 1, want: denied(0, MaxSpan/2+ns, (1<<29+2)*ns)},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, mustLimit(t, SlidingWindow, tt.requests, tt.period, 0), tt.steps)
		})
	}
}

// The boundary problem: fixed windows admit twice the limit within 2ns
// across a boundary; the sliding window weighs the previous window in and
// admits the limit there, no more.
func TestWindowBoundary(t *testing.T) {
	t.Run("fixed_window admits 2L across a boundary", func(t *testing.T) {
		runSteps(t, mustLimit(t, FixedWindow, 10, time.Minute, 0), []step{
			{at: time.Minute - ns, cost: 10, want: allowed(0, ns)},
			{at: time.Minute, cost: 10, want: allowed(0, time.Minute)},
		})
	})
	t.Run("sliding_window does not", func(t *testing.T) {
		runSteps(t, mustLimit(t, SlidingWindow, 10, time.Minute, 0), []step{
			{at: time.Minute - ns, cost: 10, want: allowed(0, time.Minute+ns)},
			{at: time.Minute, cost: 1, want: denied(0, time.Minute, 6*sec)},
			{at: time.Minute + ns, cost: 1, want: denied(0, time.Minute-ns, 6*sec-ns)},
		})
	})
	// With a period of 100ns the bound L + ⌊L·d/P⌋ allows 103 over the 3ns
	// from 99 to 101: 101 are admitted.
	t.Run("sliding_window within L+⌊L·d/P⌋", func(t *testing.T) {
		runSteps(t, mustLimit(t, SlidingWindow, 100, 100*ns, 0), []step{
			{at: 99 * ns, cost: 100, want: allowed(0, 101*ns)},
			{at: 100 * ns, cost: 1, want: denied(0, 100*ns, ns)},
			{at: 101 * ns, cost: 1, want: allowed(0, 199*ns)},
			{at: 101 * ns, cost: 1, want: denied(0, 199*ns, ns)},
		})
	})
}

// The sliding window's accuracy bound, against an adversary: the limit at
// the last nanosecond of a window and again at the first of the next, then
// a request every millisecond. Over
// every interval of length d ≤ P at most L + ⌊L·d/P⌋ are admitted; within
// 2ns of the boundary exactly L, where fixed windows admit 2L; and over a
// whole period the adversary gets 2L-1, close to 2L but never 2L.
func TestSlidingWindowAccuracyBound(t *testing.T) {
	const limit = 10
	l := mustLimit(t, SlidingWindow, limit, time.Second, 0)
	fixed := mustLimit(t, FixedWindow, limit, time.Second, 0)
	boundary := t0 + int64(time.Second)

	var adm, fixedAdm []admission
	var s, fs State
	var d Decision
	charge := func(now, cost int64) {
		if s, d = l.Decide(s, now, cost); d.Code == Allowed {
			adm = append(adm, admission{now, cost})
		}
		if fs, d = fixed.Decide(fs, now, cost); d.Code == Allowed {
			fixedAdm = append(fixedAdm, admission{now, cost})
		}
	}
	charge(boundary-1, limit)
	charge(boundary, limit)
	for now := boundary; now < boundary+int64(5*time.Second); now += int64(time.Millisecond) {
		charge(now, 1)
	}
	if msg := checkBound(l, adm); msg != "" {
		t.Fatal(msg)
	}

	// mostWithin returns the most admitted over any interval [a, a+d).
	mostWithin := func(adm []admission, d int64) int64 {
		most := int64(0)
		for i := range adm {
			n := int64(0)
			for j := i; j < len(adm) && adm[j].at < adm[i].at+d; j++ {
				n += adm[j].cost
			}
			most = max(most, n)
		}
		return most
	}
	for _, tt := range []struct {
		d            time.Duration
		sliding, fix int64
	}{
		{2 * ns, limit, 2 * limit},
		{time.Second, 2*limit - 1, 2 * limit},
	} {
		if got := mostWithin(adm, int64(tt.d)); got != tt.sliding {
			t.Errorf("sliding_window admits up to %d within %v, want %d", got, tt.d, tt.sliding)
		}
		if got := mostWithin(fixedAdm, int64(tt.d)); got != tt.fix {
			t.Errorf("fixed_window admits up to %d within %v, want %d", got, tt.d, tt.fix)
		}
	}
}
