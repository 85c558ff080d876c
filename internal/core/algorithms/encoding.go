package algorithms

import (
	"encoding/binary"
	"fmt"
	"math"
)

// StateSize is the length of a State's binary encoding.
const StateSize = 24

// AppendBinary appends s's binary encoding, StateSize bytes, to b and
// returns the extended slice (encoding.BinaryAppender). The encoding is
// little-endian: restAt and t as int64, then n and m as uint32. It is
// stable: a later version of this package decodes what an earlier one
// encoded to the same State.
func (s State) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, uint64(s.restAt))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.t))
	b = binary.LittleEndian.AppendUint32(b, s.n)
	return binary.LittleEndian.AppendUint32(b, s.m), nil
}

// UnmarshalBinary sets s from the first StateSize bytes of data, as
// AppendBinary wrote them (encoding.BinaryUnmarshaler). It fails only when
// data is not StateSize bytes long. Any 24 bytes decode to a State that
// Decide settles without panicking, but a State is only meaningful for the
// Limit that produced it and on the clock it was produced with.
func (s *State) UnmarshalBinary(data []byte) error {
	if len(data) != StateSize {
		return fmt.Errorf("algorithms: a State is %d bytes, not %d", StateSize, len(data))
	}
	s.restAt = int64(binary.LittleEndian.Uint64(data[0:]))
	s.t = int64(binary.LittleEndian.Uint64(data[8:]))
	s.n = binary.LittleEndian.Uint32(data[16:])
	s.m = binary.LittleEndian.Uint32(data[20:])
	return nil
}

// Later returns s with every time in it moved d ≥ 0 nanoseconds later
// (saturating at the int64 range), for a State written on a clock that ran
// d behind the clock it is now read with. For the buckets the moved State
// decides at now+d exactly as s decides at now. For the windows the window
// start moves too, off the multiples of the period: a window whose start
// lies in now's window or later is settled as one from a clock that went
// back (its count holds; see Decide), so the moved State admits no more than
// s at any now, and its count lapses at the first window boundary after the
// moved start. A concurrency's units expire d later (its restAt moves; its
// counts do not). A d ≤ 0 returns s unchanged, as does the zero State (at
// rest whatever the time).
func (s State) Later(d int64) State {
	if d <= 0 || s == (State{}) {
		return s
	}
	add := func(t int64) int64 {
		if t > math.MaxInt64-d {
			return math.MaxInt64
		}
		return t + d
	}
	s.restAt = add(s.restAt)
	if uint64(s.t)&countsFlag == 0 { // a time, not a concurrency's counts
		s.t = add(s.t)
	}
	return s
}
