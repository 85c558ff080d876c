package engine

import (
	"fmt"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// TestReloadKeepsWhatWasUsed: a reload that changes a limit's requests or
// burst (or moves it among the bucket algorithms) keeps its buckets and
// what they hold, read by the new limit; one that changes its period, or
// moves it between a window and a bucket or between the windows, starts
// new buckets. 7 of 10 per hour are used first; then the policy changes
// and a peek reports what is left.
func TestReloadKeepsWhatWasUsed(t *testing.T) {
	rule := func(alg string, requests, burst int, unit string) string {
		b := ""
		if burst > 0 {
			b = fmt.Sprintf(", burst: %d", burst)
		}
		return fmt.Sprintf(`
domain: d
descriptors:
  - key: tenant
    rate_limit: {algorithm: %s, unit: %s, requests_per_unit: %d%s}
`, alg, unit, requests, b)
	}
	tests := []struct {
		name          string
		before, after string
		remaining     int64
	}{
		{"fixed_window raised", rule("fixed_window", 10, 0, "hour"), rule("fixed_window", 40, 0, "hour"), 33},
		{"fixed_window lowered", rule("fixed_window", 10, 0, "hour"), rule("fixed_window", 5, 0, "hour"), 0},
		{"sliding_window raised", rule("sliding_window", 10, 0, "hour"), rule("sliding_window", 40, 0, "hour"), 33},
		{"token_bucket raised", rule("token_bucket", 10, 0, "hour"), rule("token_bucket", 40, 0, "hour"), 33},
		{"token_bucket burst raised", rule("token_bucket", 10, 0, "hour"), rule("token_bucket", 10, 20, "hour"), 13},
		{"token_bucket to leaky_bucket", rule("token_bucket", 10, 0, "hour"), rule("leaky_bucket", 10, 0, "hour"), 3},
		{"token_bucket to leaky_bucket_queue", rule("token_bucket", 10, 0, "hour"), rule("leaky_bucket_queue", 10, 0, "hour"), 3},
		// New buckets.
		{"fixed_window period changed", rule("fixed_window", 10, 0, "hour"), rule("fixed_window", 10, 0, "day"), 10},
		{"token_bucket period changed", rule("token_bucket", 10, 0, "hour"), rule("token_bucket", 240, 0, "day"), 240},
		{"fixed_window to sliding_window", rule("fixed_window", 10, 0, "hour"), rule("sliding_window", 10, 0, "hour"), 10},
		{"token_bucket to fixed_window", rule("token_bucket", 10, 0, "hour"), rule("fixed_window", 10, 0, "hour"), 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, tt.before)
			seven, zero := uint64(7), uint64(0)
			charge := &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("tenant", "t1"), Hits: &seven}}}
			if r := decide(t, e, charge); r.Statuses[0].Remaining != 3 {
				t.Fatalf("before the reload: %+v", r.Statuses[0])
			}
			p, err := config.Parse("test.yaml", []byte(tt.after))
			if err != nil {
				t.Fatal(err)
			}
			e.SetPolicy(p)
			peek := &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("tenant", "t1"), Hits: &zero}}}
			if r := decide(t, e, peek); r.Statuses[0].Remaining != tt.remaining {
				t.Fatalf("after the reload: remaining %d, want %d (%+v)", r.Statuses[0].Remaining, tt.remaining, r.Statuses[0])
			}
		})
	}
}

// TestLimitsOfOneRuleKeepTheirBuckets: two limits of one rule with the
// same kind of state and period have buckets of their own ("#2"), each
// kept across a change of its requests.
func TestLimitsOfOneRuleKeepTheirBuckets(t *testing.T) {
	policy := func(first, second int) string {
		return fmt.Sprintf(`
domain: d
descriptors:
  - key: tenant
    rate_limits:
      - {name: small, algorithm: token_bucket, unit: minute, requests_per_unit: %d, overdraft: true}
      - {name: large, algorithm: token_bucket, unit: minute, requests_per_unit: %d}
`, first, second)
	}
	e := newEngine(t, policy(10, 100))
	five := uint64(5)
	charge := &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("tenant", "t1"), Hits: &five}}}
	decide(t, e, charge)
	p, err := config.Parse("test.yaml", []byte(policy(20, 200)))
	if err != nil {
		t.Fatal(err)
	}
	e.SetPolicy(p)
	// Both buckets hold 5 used: 15 of 20 and 195 of 200 left; the status
	// reports the tighter, and the second charge takes 5 from each.
	if r := decide(t, e, charge); r.Code != 0 || r.Statuses[0].Remaining != 10 || r.Statuses[0].Limit.Name != "small" {
		t.Fatalf("after the reload: %+v", r.Statuses[0])
	}
	rules := p.Domain("d").Match(entries("tenant", "t1"))
	if got := []string{rules.Limits[0].Bucket, rules.Limits[1].Bucket}; got[0] != "bucket/1m0s" || got[1] != "bucket/1m0s#2" {
		t.Fatalf("buckets named %q", got)
	}
}
