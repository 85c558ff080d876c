package engine

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// TestDenyAllWithAnAlgorithm: requests_per_unit: 0 denies every request,
// as upstream, whichever algorithm the rule names (a policy whose rules
// all name one need not leave it out for a blocked path); no wait admits
// it, so the answer is over capacity with no retry.
func TestDenyAllWithAnAlgorithm(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket", "leaky_bucket", "leaky_bucket_queue"} {
		e := newEngine(t, `
domain: d
descriptors:
  - key: path
    value: /admin
    rate_limit: {unit: hour, requests_per_unit: 0, algorithm: `+alg+`}
`)
		r := decide(t, e, &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("path", "/admin")}}})
		if r.Code != algorithms.Denied || !r.Never || r.RetryAfter != 0 || r.Statuses[0].Code != algorithms.OverCapacity {
			t.Errorf("%s: %+v, want denied for good, over capacity, no retry", alg, r)
		}
	}
}
