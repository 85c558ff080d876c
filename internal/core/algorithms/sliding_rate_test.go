package algorithms

import (
	"testing"
	"time"
)

// TestSlidingWindowAtExactlyTheRate pins what the README says: a steady
// stream of L requests per period, evenly spaced, is admitted (L−1)/L of
// the time once the first window has passed — the previous window's
// weighted count keeps the estimate at the limit, so one request per
// window finds no room — and every other request when L is 1.
func TestSlidingWindowAtExactlyTheRate(t *testing.T) {
	const periods = 200
	for _, tt := range []struct {
		requests int64
		want     int // admitted of requests × periods
	}{
		{1, periods / 2},
		{2, 1*periods + 1},
		{4, 3*periods + 1},
		{10, 9*periods + 1},
		{100, 99*periods + 1},
	} {
		l, err := NewLimit(SlidingWindow, tt.requests, time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		var st State
		start := int64(1_700_000_040) * int64(time.Second) // a whole minute
		step := int64(time.Minute) / tt.requests
		admitted := 0
		for i := range tt.requests * periods {
			next, d := l.Decide(st, start+i*step+1, 1)
			if d.Code == Allowed {
				admitted++
				st = next
			}
		}
		if admitted != tt.want {
			t.Errorf("%d per minute at exactly that rate: %d of %d admitted, want %d", tt.requests, admitted, tt.requests*periods, tt.want)
		}
	}
}
