package algorithms_test

import (
	"slices"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/algorithms/algotest"
)

// The decision tables are algotest's cases, which the stores decide too
// (internal/store/storetest): here Limit.Decide decides them directly, and
// every decision is checked against the contract as well (CheckedDecide).

// The token bucket and the leaky bucket meter are one algorithm: every case
// runs against both and must read the same.
func TestTokenBucketAndMeter(t *testing.T) {
	runCases(t, algorithms.TokenBucket, algorithms.LeakyBucket)
}

func TestLeakyBucketQueue(t *testing.T) { runCases(t, algorithms.LeakyBucketQueue) }

func TestFixedWindow(t *testing.T) { runCases(t, algorithms.FixedWindow) }

func TestSlidingWindow(t *testing.T) { runCases(t, algorithms.SlidingWindow) }

// runCases decides, for each of algs, every algotest case for it: one
// subtest per case (per algorithm and case when algs are more than one),
// its steps in order from State{}, each through CheckedOp (CheckedDecide
// for an admit) on the limit in force at that step, each decision compared
// with the step's Want.
func runCases(t *testing.T, algs ...algorithms.Algorithm) {
	n := 0
	for _, c := range algotest.Cases() {
		for _, alg := range c.Algorithms {
			if !slices.Contains(algs, alg) {
				continue
			}
			n++
			name := c.Name
			if len(algs) > 1 {
				name = alg.String() + "/" + name
			}
			t.Run(name, func(t *testing.T) {
				limits, err := c.Limits(alg)
				if err != nil {
					t.Fatal(err)
				}
				var s algorithms.State
				for i, st := range c.Steps {
					next, d, err := algorithms.CheckedOp(limits[i], s, st.Now(), st.Kind, st.Cost)
					if err != nil {
						t.Fatalf("step %d (at %v, %v of %d): %v", i, st.At, st.Kind, st.Cost, err)
					}
					if d != st.Want {
						t.Fatalf("step %d (at %v, %v of %d):\n got %+v\nwant %+v", i, st.At, st.Kind, st.Cost, d, st.Want)
					}
					s = next
				}
			})
		}
	}
	if n == 0 {
		t.Fatalf("no case for %v", algs)
	}
}

func TestConcurrencyCases(t *testing.T) { runCases(t, algorithms.Concurrency) }
