package algorithms

import (
	"strings"
	"testing"
	"time"
)

func TestNewLimit(t *testing.T) {
	tests := []struct {
		name     string
		alg      Algorithm
		requests int64
		period   time.Duration
		burst    int64
		wantErr  string // a part of the error, "" for none
		capacity int64
	}{
		{"token bucket", TokenBucket, 5, time.Second, 10, "", 10},
		{"burst 0 means requests", LeakyBucket, 5, time.Second, 0, "", 5},
		{"window capacity is requests", FixedWindow, 5, time.Second, 0, "", 5},
		{"largest everything", TokenBucket, MaxRequests, MaxSpan, MaxRequests, "", MaxRequests},
		{"longest sliding period", SlidingWindow, 1, MaxSpan / 2, 0, "", 1},

		{"zero algorithm", 0, 5, time.Second, 0, "unknown algorithm", 0},
		{"unknown algorithm", Concurrency + 1, 5, time.Second, 0, "unknown algorithm", 0},
		{"concurrency capacity is requests", Concurrency, 20, time.Minute, 0, "", 20},
		{"most in flight", Concurrency, MaxInFlight, time.Minute, 0, "", MaxInFlight},
		{"too many in flight", Concurrency, MaxInFlight + 1, time.Minute, 0, "at most 65535 units in flight", 0},
		{"lease too long", Concurrency, 5, MaxLease + 1, 0, "lease of a concurrency must be at most", 0},
		{"burst on a concurrency", Concurrency, 5, time.Second, 10, "burst does not apply to concurrency", 0},
		{"zero requests", TokenBucket, 0, time.Second, 0, "requests must be positive", 0},
		{"too many requests", TokenBucket, MaxRequests + 1, time.Second, 0, "requests must be at most", 0},
		{"zero period", TokenBucket, 5, 0, 0, "period must be positive", 0},
		{"negative period", FixedWindow, 5, -time.Second, 0, "period must be positive", 0},
		{"period too long", FixedWindow, 5, MaxSpan + 1, 0, "period must be at most", 0},
		{"sliding period too long", SlidingWindow, 5, MaxSpan/2 + 1, 0, "sliding_window must be at most", 0},
		{"negative burst", TokenBucket, 5, time.Second, -1, "burst must not be negative", 0},
		{"burst too large", TokenBucket, 5, time.Second, MaxRequests + 1, "burst must be at most", 0},
		{"burst on a window", FixedWindow, 5, time.Second, 10, "burst does not apply to fixed_window", 0},
		{"drains too slowly", TokenBucket, 1, MaxSpan, 2, "drains in over", 0},
		// 3·MaxSpan/2 = MaxSpan + 1/2: over MaxSpan by half a nanosecond.
		{"drains a fraction too slowly", TokenBucket, 2, MaxSpan - 1, 3, "drains in over", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLimit(tt.alg, tt.requests, tt.period, tt.burst)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Algorithm() != tt.alg || l.Requests() != tt.requests || l.Period() != tt.period || l.Capacity() != tt.capacity {
				t.Errorf("got %v %d per %v capacity %d", l.Algorithm(), l.Requests(), l.Period(), l.Capacity())
			}
			if want := map[bool]int64{true: tt.capacity, false: 0}[tt.alg.usesBurst()]; l.Burst() != want {
				t.Errorf("Burst() = %d, want %d", l.Burst(), want)
			}
		})
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, alg := range Algorithms() {
		got, err := ParseAlgorithm(alg.String())
		if err != nil || got != alg {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", alg.String(), got, err)
		}
	}
	names := []string{"fixed_window", "sliding_window", "token_bucket", "leaky_bucket", "leaky_bucket_queue"}
	for i, name := range names {
		if got := Algorithms()[i].String(); got != name {
			t.Errorf("Algorithms()[%d] = %q, want %q", i, got, name)
		}
	}
	if _, err := ParseAlgorithm("Token_Bucket"); err == nil {
		t.Error("ParseAlgorithm accepts a name in the wrong case")
	}
	if got := Algorithm(9).String(); got != "Algorithm(9)" {
		t.Errorf("Algorithm(9).String() = %q", got)
	}
	for c, want := range map[Code]string{Allowed: "allowed", Denied: "denied", OverCapacity: "over_capacity", 7: "Code(?)"} {
		if c.String() != want {
			t.Errorf("Code(%d).String() = %q, want %q", c, c.String(), want)
		}
	}
}

// Decide on the zero Limit cannot admit anything, and does not panic.
func TestZeroLimit(t *testing.T) {
	var l Limit
	s := State{restAt: 5, t: 5, n: 1}
	if next, d := l.Decide(s, t0, 1); next != s || d != (Decision{Code: OverCapacity}) {
		t.Errorf("Decide(cost 1) = %+v, %+v", next, d)
	}
	if next, d := l.Decide(s, t0, 0); next != s || d != (Decision{}) {
		t.Errorf("Decide(cost 0) = %+v, %+v", next, d)
	}
}

// A now outside [0, MaxTime] is taken as the nearer end.
func TestNowOutsideRange(t *testing.T) {
	for _, alg := range Algorithms() {
		l := mustLimit(t, alg, 3, time.Second, 0)
		for _, tt := range []struct{ now, as int64 }{{-1, 0}, {-1 << 62, 0}, {MaxTime + 1, MaxTime}, {1<<63 - 1, MaxTime}} {
			var s State
			for i := range 5 {
				s1, d1 := l.Decide(s, tt.now, 1)
				s2, d2 := l.Decide(s, tt.as, 1)
				if s1 != s2 || d1 != d2 {
					t.Fatalf("%v, decision %d at %d: %+v %+v, at %d: %+v %+v", alg, i, tt.now, s1, d1, tt.as, s2, d2)
				}
				s = s1
			}
		}
	}
}
