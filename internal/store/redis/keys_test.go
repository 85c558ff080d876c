package redis

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/config"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// recorder is a store that keeps the charges it is asked to apply.
type recorder struct{ charges []store.Charge }

func (r *recorder) Apply(_ context.Context, charges []store.Charge, _ []algorithms.Decision) error {
	for _, c := range charges {
		c.Key = append([]byte(nil), c.Key...)
		r.charges = append(r.charges, c)
	}
	return nil
}

// TestOneSlotPerDomain: the engine names each charge's domain, and the
// {domain} hash tag puts all of a request's buckets in one slot.
func TestOneSlotPerDomain(t *testing.T) {
	for _, domain := range []string{"default", "a}b", "{x}", "ünïcödé", string(make([]byte, 200))} {
		rec := &recorder{}
		e := engine.New(config.Default(), rec)
		req := &engine.Request{Domain: domain, Descriptors: []engine.Descriptor{
			{Entries: []config.Entry{{Key: "generic_key", Value: "global"}}},
			{Entries: []config.Entry{{Key: "path", Value: "/orders"}}, Limit: &engine.InlineLimit{Algorithm: algorithms.TokenBucket, Requests: 5, Period: time.Second}},
		}}
		if err := e.ShouldRateLimit(context.Background(), req, &engine.Response{}); err != nil {
			t.Fatal(err)
		}
		if len(rec.charges) == 0 {
			t.Fatalf("domain %q: the engine charged no bucket", domain)
		}
		slot := -1
		for _, c := range rec.charges {
			if c.Domain != domain {
				t.Errorf("charge of %q names domain %q, want %q", c.Key, c.Domain, domain)
			}
			s := slotOf(redisKey(nil, "p:", c.Domain, c.Key, false))
			if slot >= 0 && s != slot {
				t.Errorf("domain %q: keys in slots %d and %d", domain, slot, s)
			}
			slot = s
		}
	}
}

// TestSlotOf checks the hash slots of the Redis Cluster specification's
// examples and its hash-tag rules.
func TestSlotOf(t *testing.T) {
	tests := []struct {
		key  string
		slot int
	}{
		{"123456789", 12739}, // CRC16/XMODEM("123456789") = 0x31C3
		{"{user1000}.following", slotOf([]byte("user1000"))},
		{"foo{}{bar}", slotOf([]byte("foo{}{bar}"))}, // empty tag: the whole key
		{"foo{{bar}}zap", slotOf([]byte("{bar"))},
		{"foo{bar}{zap}", slotOf([]byte("bar"))},
	}
	for _, tt := range tests {
		if got := slotOf([]byte(tt.key)); got != tt.slot {
			t.Errorf("slotOf(%q) = %d, want %d", tt.key, got, tt.slot)
		}
	}
}
