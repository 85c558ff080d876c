package algotest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/algorithms/algotest"
)

// TestCases checks the cases' form: what they decide is checked where they
// are decided (internal/core/algorithms, internal/store/storetest).
func TestCases(t *testing.T) {
	cases := algotest.Cases()
	seen := make(map[string]bool)
	for i, c := range cases {
		if c.Name == "" || len(c.Algorithms) == 0 || len(c.Steps) == 0 {
			t.Errorf("case %d (%q): no name, no algorithm or no step", i, c.Name)
		}
		for _, alg := range c.Algorithms {
			if !slices.Contains(algorithms.Algorithms(), alg) {
				t.Errorf("%q: unknown algorithm %v", c.Name, alg)
				continue
			}
			// Test names are the algorithm's and the case's.
			if name := alg.String() + "/" + c.Name; seen[name] {
				t.Errorf("two cases named %q", name)
			} else {
				seen[name] = true
			}
			if _, err := c.Limit(alg); err != nil {
				t.Errorf("%q: %v", c.Name, err)
			}
		}
		// The token bucket and the leaky bucket meter are one algorithm.
		if slices.Contains(c.Algorithms, algorithms.TokenBucket) != slices.Contains(c.Algorithms, algorithms.LeakyBucket) {
			t.Errorf("%q: for token_bucket or leaky_bucket, not both", c.Name)
		}
		if c.Period <= 24*time.Hour && algotest.Start%int64(c.Period) != 0 {
			t.Errorf("%q: Start is not a multiple of the period %v", c.Name, c.Period)
		}
	}
	// Cases returns a copy: changing one does not change the next.
	cases[0].Steps[0].Cost++
	if algotest.Cases()[0].Steps[0] == cases[0].Steps[0] {
		t.Error("Cases shares its slices between calls")
	}
}
