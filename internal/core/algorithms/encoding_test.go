package algorithms

import (
	"math"
	"testing"
	"time"
)

func TestStateBinaryRoundTrip(t *testing.T) {
	states := []State{
		{},
		{restAt: 1, t: 2, n: 3, m: 4},
		{restAt: math.MaxInt64, t: math.MinInt64, n: math.MaxUint32, m: math.MaxUint32},
		{restAt: -1, t: -2},
	}
	for _, s := range states {
		b, err := s.AppendBinary([]byte("prefix"))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != len("prefix")+StateSize || string(b[:6]) != "prefix" {
			t.Fatalf("AppendBinary(%+v) = %x: want the prefix and %d bytes", s, b, StateSize)
		}
		var got State
		if err := got.UnmarshalBinary(b[6:]); err != nil {
			t.Fatal(err)
		}
		if got != s {
			t.Errorf("round trip of %+v gave %+v", s, got)
		}
	}
}

// The encoding is part of the snapshot file format: it must not change.
func TestStateBinaryIsStable(t *testing.T) {
	b, _ := State{restAt: 0x0102030405060708, t: 0x1112131415161718, n: 0x21222324, m: 0x31323334}.AppendBinary(nil)
	const want = "0807060504030201" + "1817161514131211" + "24232221" + "34333231"
	if got := hexOf(b); got != want {
		t.Errorf("encoding = %s, want %s", got, want)
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestStateUnmarshalWrongLength(t *testing.T) {
	var s State
	for _, n := range []int{0, StateSize - 1, StateSize + 1} {
		if err := s.UnmarshalBinary(make([]byte, n)); err == nil {
			t.Errorf("UnmarshalBinary of %d bytes: no error", n)
		}
	}
}

// Later(d) on the buckets is exact: the moved state decides at now+d as the
// original at now. On the windows and concurrency it never admits more
// than the original at the same now.
func TestStateLater(t *testing.T) {
	const d = int64(3*time.Second + 7)
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			burst := int64(0)
			if alg.usesBurst() {
				burst = 5
			}
			l, err := NewLimit(alg, 5, 10*time.Second, burst)
			if err != nil {
				t.Fatal(err)
			}
			now := benchStart + int64(4*time.Second)
			var s State
			for range 5 {
				s, _ = l.Decide(s, now, 1)
			}
			moved := s.Later(d)
			for step := int64(0); step < int64(30*time.Second); step += int64(250 * time.Millisecond) {
				at := now + step
				_, orig := l.Decide(s, at, 1)
				_, same := l.Decide(moved, at, 1)
				if same.Code == Allowed && orig.Code != Allowed {
					t.Fatalf("at +%v the moved state admits what the original denies", time.Duration(step))
				}
				if alg == FixedWindow || alg == SlidingWindow || alg == Concurrency {
					// A concurrency's units expire at the end of the
					// generation the moved restAt falls in (TestConcurrencyLater).
					continue
				}
				_, later := l.Decide(moved, at+d, 1)
				if later != orig {
					t.Fatalf("at +%v: moved state at now+d decides %+v, original at now %+v", time.Duration(step), later, orig)
				}
			}
		})
	}
	if (State{}).Later(d) != (State{}) {
		t.Error("the zero State moved")
	}
	s := State{restAt: 10, t: 5}
	if s.Later(-4) != s || s.Later(0) != s {
		t.Error("Later(d ≤ 0) changed the State")
	}
	if got := (State{restAt: math.MaxInt64 - 1, t: 1}).Later(d); got.restAt != math.MaxInt64 || got.t != 1+d {
		t.Errorf("Later does not saturate: %+v", got)
	}
}
