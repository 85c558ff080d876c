package memory

import (
	"encoding/binary"
	"math/bits"
)

// sipHash128 returns SipHash-2-4 of m under the 128-bit key (k0, k1) with
// its 128-bit output (Aumasson and Bernstein, "SipHash: a fast short-input
// PRF", 2012, and the authors' definition of the doubled tag), as two
// little-endian words: the tag's bytes are lo's eight bytes, then hi's.
//
// SipHash is a pseudorandom function: to whoever does not know the key,
// its outputs on distinct messages look independent and uniform, even to
// one who chooses the messages after seeing earlier outputs. It allocates
// nothing and reads m once, two compression rounds per 8 bytes.
func sipHash128(k0, k1 uint64, m []byte) (lo, hi uint64) {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d ^ 0xee // 0xee: the 128-bit output
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(m)
	for ; len(m) >= 8; m = m[8:] {
		w := binary.LittleEndian.Uint64(m)
		v3 ^= w
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= w
	}
	// The last word: the remaining 0 to 7 bytes, and the length's low byte
	// in the top byte.
	w := uint64(n) << 56
	for i := len(m) - 1; i >= 0; i-- {
		w |= uint64(m[i]) << (8 * i)
	}
	v3 ^= w
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= w

	v2 ^= 0xee
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	lo = v0 ^ v1 ^ v2 ^ v3

	v1 ^= 0xdd
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	hi = v0 ^ v1 ^ v2 ^ v3
	return lo, hi
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
