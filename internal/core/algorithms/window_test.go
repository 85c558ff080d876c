package algorithms

import (
	"testing"
	"time"
)

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
