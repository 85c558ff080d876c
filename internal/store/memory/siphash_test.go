package memory

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
)

// TestSipHash128Vectors checks sipHash128 against test vectors of
// SipHash-2-4 with 128-bit output published with the authors' reference
// implementation: key 00 01 … 0f, message 00 01 … (n-1), for lengths
// around each 8-byte word boundary.
func TestSipHash128Vectors(t *testing.T) {
	var key [16]byte
	msg := make([]byte, 64)
	for i := range key {
		key[i] = byte(i)
	}
	for i := range msg {
		msg[i] = byte(i)
	}
	k0, k1 := binary.LittleEndian.Uint64(key[:8]), binary.LittleEndian.Uint64(key[8:])
	for _, tt := range []struct {
		n    int
		want string
	}{
		{0, "a3817f04ba25a8e66df67214c7550293"},
		{1, "da87c1d86b99af44347659119b22fc45"},
		{2, "8177228da4a45dc7fca38bdef60affe4"},
		{3, "9c70b60c5267a94e5f33b6b02985ed51"},
		{4, "f88164c12d9c8faf7d0f6e7c7bcd5579"},
		{5, "1368875980776f8854527a07690e9627"},
		{6, "14eeca338b208613485ea0308fd7a15e"},
		{7, "a1f1ebbed8dbc153c0b84aa61ff08239"},
		{8, "3b62a9ba6258f5610f83e264f31497b4"},
		{9, "264499060ad9baabc47f8b02bb6d71ed"},
		{15, "5493e99933b0a8117e08ec0f97cfc3d9"},
		{16, "6ee2a4ca67b054bbfd3315bf85230577"},
		{17, "473d06e8738db89854c066c47ae47740"},
		{31, "2939b0183223fafc1723de4f52c43d35"},
		{32, "7c3956ca5eeafc3e363e9d556546eb68"},
		{63, "5150d1772f50834a503e069a973fbd7c"},
	} {
		lo, hi := sipHash128(k0, k1, msg[:tt.n])
		var tag [16]byte
		binary.LittleEndian.PutUint64(tag[:8], lo)
		binary.LittleEndian.PutUint64(tag[8:], hi)
		if got := hex.EncodeToString(tag[:]); got != tt.want {
			t.Errorf("%d bytes: %s, want %s", tt.n, got, tt.want)
		}
	}
}

// TestDigestIsKeyed: a long key's stored key is SipHash-2-4-128 of the key
// under the store's secret seed, as the package documentation says: the
// same in one store every time, different in a store with another seed.
func TestDigestIsKeyed(t *testing.T) {
	key := []byte(strings.Repeat("a key longer than MaxVerbatimKey, ", 3))
	a, b := New(clock.NewFake(t0)), New(clock.NewFake(t0))
	var da, da2, db [DigestSize]byte
	if !a.digest(key, &da) || !a.digest(key, &da2) || !b.digest(key, &db) {
		t.Fatalf("a %d-byte key was not digested", len(key))
	}
	lo, hi := sipHash128(binary.LittleEndian.Uint64(a.keySeed[:8]), binary.LittleEndian.Uint64(a.keySeed[8:]), key)
	var want [DigestSize]byte
	binary.LittleEndian.PutUint64(want[:8], lo)
	binary.LittleEndian.PutUint64(want[8:], hi)
	if da != want || da2 != want {
		t.Errorf("digest %x, then %x; want SipHash-2-4-128 under the seed, %x", da, da2, want)
	}
	if db == da {
		t.Errorf("two stores digest the key alike (%x): the digest does not depend on the seed", da)
	}
	if a.keySeed == [16]byte{} {
		t.Error("the store's seed is zero")
	}
}
