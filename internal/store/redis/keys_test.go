package redis

import (
	"fmt"
	"testing"
)

// TestRedisKey: the prefix, the {domain} hash tag unless spread, then the
// bucket key, byte for byte.
func TestRedisKey(t *testing.T) {
	tests := []struct {
		prefix, domain, key string
		spread              bool
		want                string
	}{
		{"ratelimitd:", "shop", "\x04shop\x04path", false, "ratelimitd:{shop}\x04shop\x04path"},
		{"ratelimitd:", "shop", "\x04shop\x04path", true, "ratelimitd:\x04shop\x04path"},
		{"p:", "a}b", "k", false, "p:{a}b}k"},
		{"p:", "", "k", false, "p:{}k"},
		{"p:", "shop", "", false, "p:{shop}"},
	}
	for _, tt := range tests {
		if got := string(redisKey([]byte("junk")[:0], tt.prefix, tt.domain, []byte(tt.key), tt.spread)); got != tt.want {
			t.Errorf("redisKey(%q, %q, %q, spread %v) = %q, want %q", tt.prefix, tt.domain, tt.key, tt.spread, got, tt.want)
		}
	}
}

// TestOneSlotPerDomain: with the {domain} hash tag every bucket of a
// domain — and so every charge of a request, which the engine names by the
// request's domain — is in the slot of the domain's tag, whatever the
// bytes of the domain, the prefix and the bucket keys. (That the engine
// names each charge's domain is the engine's to test.)
func TestOneSlotPerDomain(t *testing.T) {
	keys := []string{"", "a", "{b}", "}{", "\x00\xff", "\x07default\x0bgeneric_key\x06global", "\x04shop\x04path\x07/orders"}
	tests := []struct {
		domain string
		hashed string // what Redis hashes of "{" + domain + "}": up to the first '}'
	}{
		{"default", "default"},
		{"a}b", "a"},
		{"{x}", "{x"},
		{"ünïcödé", "ünïcödé"},
		{string(make([]byte, 200)), string(make([]byte, 200))},
	}
	for _, tt := range tests {
		want := int(crc16([]byte(tt.hashed)) & 16383)
		for _, prefix := range []string{"ratelimitd:", "p:"} {
			for _, k := range keys {
				if got := slotOf(redisKey(nil, prefix, tt.domain, []byte(k), false)); got != want {
					t.Errorf("domain %q, prefix %q, key %q: slot %d, want %d (the domain's)", tt.domain, prefix, k, got, want)
				}
			}
		}
	}
}

// TestSpreadKeys: without the hash tag (and with an empty domain, whose
// tag "{}" Redis ignores) the whole key is hashed, so a domain's buckets
// spread over the slots.
func TestSpreadKeys(t *testing.T) {
	for _, tt := range []struct {
		domain string
		spread bool
	}{{"shop", true}, {"", false}} {
		slots := make(map[int]bool)
		for i := range 100 {
			key := fmt.Appendf(nil, "\x04shop\x04user%d", i)
			full := redisKey(nil, "p:", tt.domain, key, tt.spread)
			if got, want := slotOf(full), int(crc16(full)&16383); got != want {
				t.Errorf("domain %q, spread %v: slotOf(%q) = %d, want %d (the whole key's)", tt.domain, tt.spread, full, got, want)
			}
			slots[slotOf(full)] = true
		}
		if len(slots) < 90 {
			t.Errorf("domain %q, spread %v: 100 buckets in %d slots, want them spread", tt.domain, tt.spread, len(slots))
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
