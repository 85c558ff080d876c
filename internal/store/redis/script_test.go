package redis

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// TestChargeSpecs: the cached charge strings are exactly what formatCharge
// makes for each limit, cost, kind and shadow flag, across more distinct charges
// than the cache keeps (it starts over) and when asked again.
func TestChargeSpecs(t *testing.T) {
	var cs chargeSpecs
	var charges []store.Charge
	for i := range maxChargeSpecs + 100 {
		alg := []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.TokenBucket,
			algorithms.LeakyBucket, algorithms.LeakyBucketQueue}[i%5]
		l, err := algorithms.NewLimit(alg, int64(1+i/10), time.Duration(1+i%7)*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		charges = append(charges, store.Charge{Limit: &l, Cost: int64(i % 3), Shadow: i%4 == 0, Kind: algorithms.Kind(i / 5 % 4)})
	}
	for round := range 2 {
		for i := range charges {
			c := &charges[i]
			got, want := cs.of(c, false), formatCharge(c, false)
			if got != want {
				t.Fatalf("round %d, charge %d: %q, want %q", round, i, got, want)
			}
		}
	}
	if n := cs.n.Load(); n < 1 || n > maxChargeSpecs {
		t.Errorf("the cache counts %d charges, want 1 to %d", n, maxChargeSpecs)
	}
	// The same limit at another cost or shadow flag is another charge.
	l, _ := algorithms.NewLimit(algorithms.TokenBucket, 5, time.Second, 0)
	a := cs.of(&store.Charge{Limit: &l, Cost: 1}, false)
	b := cs.of(&store.Charge{Limit: &l, Cost: 2}, false)
	c := cs.of(&store.Charge{Limit: &l, Cost: 1, Shadow: true}, false)
	d := cs.of(&store.Charge{Limit: &l, Cost: 1, Kind: algorithms.Overdraft}, false)
	if a == b || a == c || b == c || d == a || d == b || d == c {
		t.Errorf("charges differing in cost, shadow or kind share a string: %q %q %q %q", a, b, c, d)
	}
}
