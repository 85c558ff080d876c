package ratelimitheader

import (
	"math"
	"testing"
	"time"
)

func TestSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {120 * time.Millisecond, 1}, {90 * time.Second, 90},
	}
	for _, tt := range tests {
		if got := Seconds(tt.d); got != tt.want {
			t.Errorf("Seconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestRefill(t *testing.T) {
	tests := []struct {
		name               string
		capacity, requests int64
		period, want       time.Duration
	}{
		{"window", 100, 100, time.Minute, time.Minute},
		{"bucket with burst", 800, 600, time.Minute, 80 * time.Second},
		{"rounded up to the nanosecond", 1, 3, time.Second, 333333334},
		{"no rate", 5, 0, time.Second, 0},
		{"no period", 5, 5, 0, 0},
		{"saturates", math.MaxUint32, 1, time.Duration(1 << 62), math.MaxInt64},
	}
	for _, tt := range tests {
		if got := Refill(tt.capacity, tt.requests, tt.period); got != tt.want {
			t.Errorf("%s: Refill(%d, %d, %v) = %v, want %v", tt.name, tt.capacity, tt.requests, tt.period, got, tt.want)
		}
	}
}

func TestFieldValues(t *testing.T) {
	tests := []struct{ got, want string }{
		{Name("checkout"), `"checkout"`},
		{Name(`a"b\c`), `"a\"b\\c"`},
		{Name(""), `"default"`},
		{Name("naïve"), `"default"`},
		{Name("tab\there"), `"default"`},
		{PolicyValue(Name("per-user"), 800, 80*time.Second), `"per-user";q=800;w=80`},
		{PolicyValue(Name("blocked"), 0, 0), `"blocked";q=0`},
		{RateLimitValue(Name("per-user"), 37, 2500*time.Millisecond), `"per-user";r=37;t=3`},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
}
