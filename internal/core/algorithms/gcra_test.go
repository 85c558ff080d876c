package algorithms

import (
	"testing"
	"time"
)

// "5 per second" and "1 per 200ms" are one rate; so are 7 per 3s and 14 per
// 6s, whose interval 428,571,428 4/7 ns is not whole. Every decision agrees.
func TestBucketRateIsARational(t *testing.T) {
	pairs := []struct {
		r1 int64
		p1 time.Duration
		r2 int64
		p2 time.Duration
	}{
		{5, sec, 1, 200 * ms},
		{7, 3 * sec, 14, 6 * sec},
		{1e9, sec, 1, ns},
	}
	for _, pair := range pairs {
		for _, alg := range []Algorithm{TokenBucket, LeakyBucket, LeakyBucketQueue} {
			a := mustLimit(t, alg, pair.r1, pair.p1, 4)
			b := mustLimit(t, alg, pair.r2, pair.p2, 4)
			interval := pair.p1 / time.Duration(pair.r1)
			rng := newRand(uint64(pair.r1))
			var sa, sb State
			now := t0
			for i := range 20000 {
				now += rng.Int64N(int64(interval) * 2)
				cost := rng.Int64N(6)
				var da, db Decision
				sa, da = a.Decide(sa, now, cost)
				sb, db = b.Decide(sb, now, cost)
				if da != db {
					t.Fatalf("%v %d per %v vs %d per %v, decision %d: %+v vs %+v", alg, pair.r1, pair.p1, pair.r2, pair.p2, i, da, db)
				}
			}
		}
	}
}
