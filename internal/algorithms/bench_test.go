package algorithms

import (
	"testing"
	"time"
	"unsafe"
)

// benchLimits are the limits the benchmarks and the allocation test decide
// against: 100 per second (burst 100 for the buckets), asked every 7ms, so
// that both admissions and denials occur, with costs 1 and 3.
func benchLimit(tb testing.TB, alg Algorithm) Limit {
	tb.Helper()
	burst := int64(0)
	if alg.usesBurst() {
		burst = 100
	}
	l, err := NewLimit(alg, 7, 3*time.Second, burst)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

const benchStart = int64(1_767_225_600_000_000_000) // 2026-01-01T00:00:00Z

func BenchmarkDecide(b *testing.B) {
	for _, alg := range Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimit(b, alg)
			var s State
			now := benchStart
			admitted := 0
			for i := 0; b.Loop(); i++ {
				now += int64(7 * time.Millisecond)
				var d Decision
				s, d = l.Decide(s, now, int64(1+i&2))
				if d.Code == Allowed {
					admitted++
				}
			}
			if admitted == 0 {
				b.Fatal("nothing admitted")
			}
		})
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			l := benchLimit(t, alg)
			var s State
			now := benchStart
			i := int64(0)
			allocs := testing.AllocsPerRun(1000, func() {
				now += int64(7 * time.Millisecond)
				i++
				s, _ = l.Decide(s, now, 1+i%5)
			})
			if allocs != 0 {
				t.Errorf("Decide allocates %v times per call, want 0", allocs)
			}
		})
	}
}

func TestStateSize(t *testing.T) {
	if got := unsafe.Sizeof(State{}); got > 24 {
		t.Errorf("unsafe.Sizeof(State{}) = %d bytes, want at most 24", got)
	}
}
