package topdenied

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
)

// hashKey is the secret a Tracker's descriptor hashes are keyed with: 320
// random bits, drawn once per Tracker.
//
// Descriptor values are chosen by end users, so the hash that tells
// descriptors apart must be one an attacker cannot compute, or they could
// choose values that count as someone else's descriptor or that pile up
// in one stripe and one probe run. hash/maphash is such a hash, but it
// costs about 4 ns a call, one call per part of a descriptor; this one
// takes a descriptor's parts in one pass, about 2 ns a part.
//
// It folds a part 16 bytes at a time into a running state h, each step a
// 64×64→128-bit multiplication of the key-masked input words (the state
// in one of them) whose halves are XORed together — the construction of
// wyhash, which the Go runtime uses for its maps on machines without AES
// hash instructions. The last 1 to 16 bytes are read as two words that
// overlap when fewer than 16, so that every byte is read: two parts of the
// same length give the same words only if they are equal. The length,
// times a key word, is XORed into a part's result: parts of different
// lengths are told apart through the key, which an attacker cannot cancel
// with chosen bytes as they could a plain length. The hash is never shown:
// it only picks a stripe, a table place and whether two descriptors are
// counted as one.
type hashKey [5]uint64

func newHashKey() hashKey {
	var b [40]byte
	rand.Read(b[:]) // never fails (crypto/rand: the process dies first)
	var k hashKey
	for i := range k {
		k[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return k
}

// part folds s, with its length, into the state h.
func (k *hashKey) part(h uint64, s string) uint64 {
	n := len(s)
	for len(s) > 16 {
		h = mix(le64(s)^k[0], le64(s[8:])^h^k[1])
		s = s[16:]
	}
	// The last 0 to 16 bytes.
	var a, b uint64
	switch m := len(s); {
	case m >= 8:
		a, b = le64(s), le64(s[m-8:])
	case m >= 4:
		a, b = le32(s), le32(s[m-4:])
	case m > 0:
		a = uint64(s[0])<<16 | uint64(s[m>>1])<<8 | uint64(s[m-1])
	}
	return mix(a^k[2], b^h^k[3]) ^ uint64(n)*k[4]
}

// word folds x into the state h.
func (k *hashKey) word(h, x uint64) uint64 { return mix(x^k[0], h^k[3]) }

// mix multiplies a and b into 128 bits and returns the XOR of the halves.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 and le32 read the first 8 and 4 bytes of s, little-endian (the
// compiler makes each one load).
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}
