package config

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// TestBucketNames: a limit's Bucket is its kind of state and period — the
// same for token_bucket, leaky_bucket and leaky_bucket_queue, whatever
// their requests and burst — with "#n" for the nth limit of a rule with
// that name, "inline:" first for an inline limit, and empty for limits
// that keep no bucket.
func TestBucketNames(t *testing.T) {
	p, err := Parse("b.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limits:
      - {algorithm: token_bucket, unit: minute, requests_per_unit: 10}
      - {algorithm: fixed_window, unit: minute, requests_per_unit: 100}
      - {algorithm: leaky_bucket_queue, unit: minute, requests_per_unit: 20, burst: 5}
      - {algorithm: sliding_window, unit: second, unit_multiplier: 60, requests_per_unit: 7}
      - {algorithm: leaky_bucket, unit: hour, requests_per_unit: 1}
      - {algorithm: concurrency, max_in_flight: 20, lease: 1m}
  - key: u
    rate_limit: {unlimited: true}
  - key: z
    rate_limit: {unit: second, requests_per_unit: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	dom := p.Domain("d")
	var got []string
	for _, l := range dom.Match([]Entry{{Key: "a", Value: "x"}}).Limits {
		got = append(got, l.Bucket)
	}
	want := []string{"bucket/1m0s", "fixed_window/1m0s", "bucket/1m0s#2", "sliding_window/1m0s", "bucket/1h0m0s", "concurrency/1m0s"}
	if len(got) != len(want) {
		t.Fatalf("buckets %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("limit %d: Bucket %q, want %q", i, got[i], want[i])
		}
	}
	for _, k := range []string{"u", "z"} {
		if b := dom.Match([]Entry{{Key: k, Value: "x"}}).Limits[0].Bucket; b != "" {
			t.Errorf("%s keeps no bucket, but its Bucket is %q", k, b)
		}
	}
	l, err := NewInlineLimit("", algorithms.LeakyBucketQueue, 600, time.Minute, 800)
	if err != nil {
		t.Fatal(err)
	}
	if l.Bucket != "inline:bucket/1m0s" {
		t.Errorf("inline Bucket %q", l.Bucket)
	}
}
