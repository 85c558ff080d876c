package quota_test

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

// TestReportBounds: what a report says is bounded: an elapsed time over a
// minute counts as a minute (its TTL 90s, its share committed 105s); what
// it asked saturates; an assumed interval over a minute is a minute. (A
// TTL is 1.5 intervals rounded up to whole seconds: 2s for 1s.)
func TestReportBounds(t *testing.T) {
	limit := quota.Limit{Requests: 600, Period: time.Minute}
	for _, tc := range []struct {
		name     string
		assumed  time.Duration
		asked    uint64
		elapsed  time.Duration
		share    int64
		ttl      time.Duration
		reported []uint64 // asked by earlier reports with no elapsed time
	}{
		{"a second", time.Second, 10, time.Second, 600, 2 * time.Second, nil},
		{"a minute", time.Second, 10, time.Minute, 10, 90 * time.Second, nil},
		{"a year: a minute", time.Second, 1 << 62, 365 * 24 * time.Hour, 600, 90 * time.Second, nil},
		{"assumed an hour: a minute", time.Hour, 1, 0, 1, 90 * time.Second, nil},
		{"asked past 2^64 over reports: saturates", time.Second, 1 << 63, time.Second, 600, 2 * time.Second, []uint64{1 << 63}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := quota.New(tc.assumed)
			for _, asked := range tc.reported {
				a.Report("b", limit, "c", asked, 0, t0)
			}
			as, _, _ := a.Report("b", limit, "c", tc.asked, tc.elapsed, t0)
			if as.Share != tc.share || as.TTL != tc.ttl {
				t.Fatalf("got share %d, TTL %v; want %d, %v", as.Share, as.TTL, tc.share, tc.ttl)
			}
		})
	}
	// The year-long reporter leaves: its share is free 105s after it was sent.
	a := quota.New(time.Second)
	clk := clock.NewFake(t0)
	a.Report("b", limit, "gone", 1<<62, 365*24*time.Hour, clk.Now())
	a.Gone("b", "gone", clk.Now())
	clk.Set(t0 + int64(105*time.Second) - 1)
	if as, _, _ := a.Report("b", limit, "next", 1000, time.Second, clk.Now()); as.Share != 0 {
		t.Fatalf("the next client, while the year-long reporter's share may still be applied: %d", as.Share)
	}
	clk.Set(t0 + int64(105*time.Second))
	if p := a.Tick(clk.Now()); len(p) != 1 || p[0].Share != 600 {
		t.Fatalf("105s after the year-long reporter's share was sent: pushes %+v, want all 600 to the next", p)
	}
}
