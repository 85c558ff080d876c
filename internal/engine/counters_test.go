package engine

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// counterRecorder is a store that admits everything and keeps each
// charge's store.Charge.Counter ("-" for none).
type counterRecorder struct{ counters []string }

func (r *counterRecorder) Apply(_ context.Context, charges []store.Charge, _ []algorithms.Decision) error {
	for _, c := range charges {
		name := "-"
		if c.Counter != nil {
			name = string(c.Counter)
		}
		r.counters = append(r.counters, name)
	}
	return nil
}

// TestCounterKeys: with WithCounterKeys, a fixed window's charge carries
// envoyproxy/ratelimit's name of its bucket (share_threshold's pattern for
// the values it shares) where the name is the bucket's alone; without it,
// none does.
func TestCounterKeys(t *testing.T) {
	const policy = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    value: /uploads/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: token
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket}
  - key: tenant
    rate_limits:
      - {unit: minute, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 50}
  - key: model
    rate_limits:
      - {unit: minute, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 50, algorithm: sliding_window}
`
	p, err := config.Parse("test.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	inline := &InlineLimit{Algorithm: algorithms.FixedWindow, Requests: 3, Period: time.Minute}
	tests := []struct {
		name        string
		descriptors []Descriptor
		want        []string
	}{
		{"a fixed window", []Descriptor{{Entries: entries("user", "alice")}}, []string{"api_user_alice_"}},
		{"nested", []Descriptor{{Entries: entries("user", "alice", "path", "/a")}}, []string{"api_user_alice_path_/a_"}},
		{"share_threshold's pattern", []Descriptor{{Entries: entries("path", "/uploads/x")}}, []string{"api_path_/uploads/*_"}},
		{"a token bucket keeps its own key", []Descriptor{{Entries: entries("token", "t")}}, []string{"-"}},
		{"two fixed windows on a rule: upstream would name both alike", []Descriptor{{Entries: entries("tenant", "t")}}, []string{"-", "-"}},
		{"a fixed window beside a sliding window", []Descriptor{{Entries: entries("model", "m")}}, []string{"api_model_m_", "-"}},
		{"an inline limit", []Descriptor{{Entries: entries("any", "x"), Limit: inline}}, []string{"api_any_x_"}},
		{"one name twice in a request: the first charge's", []Descriptor{
			{Entries: entries("user", "bob")},
			{Entries: entries("user", "bob"), Limit: inline},
		}, []string{"api_user_bob_", "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, on := range []bool{false, true} {
				rec := &counterRecorder{}
				e := New(p, rec, WithCounterKeys(on))
				decide(t, e, &Request{Domain: "api", Descriptors: tt.descriptors})
				want := tt.want
				if !on {
					want = make([]string, len(tt.want))
					for i := range want {
						want[i] = "-"
					}
				}
				if len(rec.counters) != len(want) {
					t.Fatalf("counter keys %v: counters %q, want %q", on, rec.counters, want)
				}
				for i := range want {
					if rec.counters[i] != want[i] {
						t.Errorf("counter keys %v: counters %q, want %q", on, rec.counters, want)
						break
					}
				}
			}
		})
	}
}
