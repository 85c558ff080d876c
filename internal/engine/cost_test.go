package engine

import (
	"math"
	"testing"
)

func TestCost(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	tests := []struct {
		name        string
		requestHits uint64
		own         *uint64
		want        int64
	}{
		{"neither set: 1", 0, nil, 1},
		{"the request's", 5, nil, 5},
		{"the descriptor's wins", 5, u(2), 2},
		{"the descriptor's 0 is a peek", 5, u(0), 0},
		{"the descriptor's 0 with the request's 0", 0, u(0), 0},
		{"saturates", math.MaxUint64, nil, math.MaxInt64},
		{"the descriptor's saturates", 0, u(math.MaxInt64 + 1), math.MaxInt64},
	}
	for _, tt := range tests {
		if got := Cost(tt.requestHits, tt.own); got != tt.want {
			t.Errorf("%s: Cost(%d, %v) = %d, want %d", tt.name, tt.requestHits, tt.own, got, tt.want)
		}
	}
}
