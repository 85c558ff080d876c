package config

import "testing"

// TestTakesOverdraft: rate_limit.overdraft as written, and the daemon's
// default for a limit that does not say; limits without a bucket never
// take overdraft.
func TestTakesOverdraft(t *testing.T) {
	p, err := Parse("t.yaml", []byte(`
domain: d
descriptors:
  - {key: on, rate_limit: {unit: minute, requests_per_unit: 1000, overdraft: true}}
  - {key: off, rate_limit: {unit: minute, requests_per_unit: 1000, overdraft: false}}
  - {key: yaml11, rate_limit: {unit: minute, requests_per_unit: 1000, overdraft: yes}}
  - {key: unsaid, rate_limit: {unit: minute, requests_per_unit: 1000}}
  - {key: nil, rate_limit: {unit: minute, requests_per_unit: 1000, overdraft: ~}}
  - {key: unlimited, rate_limit: {unlimited: true}}
  - {key: deny, rate_limit: {unit: minute, requests_per_unit: 0}}
  - {key: streams, rate_limit: {algorithm: concurrency, max_in_flight: 20, lease: 10m}}
  - {key: streams_on, rate_limit: {algorithm: concurrency, max_in_flight: 20, lease: 10m, overdraft: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key                 string
		want                Overdraft
		byDefault, notByDef bool
	}{
		{"on", OverdraftOn, true, true},
		{"off", OverdraftOff, false, false},
		{"yaml11", OverdraftOn, true, true},
		{"unsaid", OverdraftDefault, true, false},
		{"nil", OverdraftDefault, true, false},
		{"unlimited", OverdraftDefault, false, false},
		{"deny", OverdraftDefault, false, false},
		// A concurrency is a budget of places, not usage after the fact:
		// the default does not make it take every charge.
		{"streams", OverdraftDefault, false, false},
		{"streams_on", OverdraftOn, true, true},
	}
	for _, tt := range tests {
		r := p.Domain("d").Match([]Entry{{Key: tt.key}})
		if r == nil {
			t.Fatalf("%s: no rule", tt.key)
		}
		l := r.Limits[0]
		if l.Overdraft != tt.want {
			t.Errorf("%s: Overdraft = %v, want %v", tt.key, l.Overdraft, tt.want)
		}
		if got := l.TakesOverdraft(true); got != tt.byDefault {
			t.Errorf("%s: TakesOverdraft(true) = %v, want %v", tt.key, got, tt.byDefault)
		}
		if got := l.TakesOverdraft(false); got != tt.notByDef {
			t.Errorf("%s: TakesOverdraft(false) = %v, want %v", tt.key, got, tt.notByDef)
		}
	}
	// Overdraft is not arithmetic: the same limit with and without it
	// shares its buckets.
	on := p.Domain("d").Match([]Entry{{Key: "on"}}).Limits[0]
	off := p.Domain("d").Match([]Entry{{Key: "off"}}).Limits[0]
	if on.Key != off.Key {
		t.Errorf("keys %q and %q differ: overdraft must not start new buckets", on.Key, off.Key)
	}
}
