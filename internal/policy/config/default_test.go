package config

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// TestDefaultParses parses the embedded file itself, so that a broken file
// fails here with its problems rather than as Default's panic.
func TestDefaultParses(t *testing.T) {
	if _, err := Parse(defaultSource, defaultYAML); err != nil {
		t.Fatalf("default.yaml:\n%v", err)
	}
	if Default() != Default() {
		t.Error("Default returns a new policy each call")
	}
}

func TestDefault(t *testing.T) {
	p := Default()
	if ds := p.Domains(); len(ds) != 1 || ds[0].Name != "default" || ds[0].Source != "embedded:default.yaml" {
		t.Fatalf("Domains() = %v, want only default from embedded:default.yaml", ds)
	}
	d := p.Domain("default")
	tests := []struct {
		request         string
		name, statKey   string
		requests, burst int64
	}{
		{"generic_key=global", "global", "default.generic_key_global", 6000, 7000},
		{"path=/orders", "per-endpoint", "default.path", 3000, 4000},
		{"path=/users", "per-endpoint", "default.path", 3000, 4000},
		{"path=/orders,user=alice", "per-user-per-endpoint", "default.path.user", 600, 800},
		{"path=/orders,user=bob", "per-user-per-endpoint", "default.path.user", 600, 800},
	}
	for _, tt := range tests {
		r := d.Match(entries(tt.request))
		if r == nil {
			t.Errorf("Match(%s) = nil, want %s", tt.request, tt.name)
			continue
		}
		l := r.Limits[0]
		if len(r.Limits) != 1 || l.Name != tt.name || r.StatKey != tt.statKey || r.ShadowMode ||
			l.Rate.Algorithm() != algorithms.TokenBucket || l.Rate.Requests() != tt.requests ||
			l.Rate.Period() != time.Minute || l.Rate.Burst() != tt.burst || l.Unit != UnitMinute {
			t.Errorf("Match(%s) = %s %q: %v %d per %v burst %d", tt.request, r.StatKey, l.Name,
				l.Rate.Algorithm(), l.Rate.Requests(), l.Rate.Period(), l.Rate.Burst())
		}
	}
	for _, request := range []string{"generic_key=other", "user=alice", "user=alice,path=/orders", "path=/orders,user=alice,x=y"} {
		if r := d.Match(entries(request)); r != nil {
			t.Errorf("Match(%s) = %s, want no match", request, r.StatKey)
		}
	}
}
