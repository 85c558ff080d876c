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

// BenchmarkCheck compares a check (Limit.Check: a cost of 1, charged
// nothing) with a charge of cost 1 (Decide), each on the same 1024 states
// and times of a timeline as BenchmarkDecide's, where both admissions and
// denials occur: a check must cost no more than a charge.
func BenchmarkCheck(b *testing.B) {
	for _, alg := range Algorithms() {
		l := benchLimit(b, alg)
		type at struct {
			s   State
			now int64
		}
		timeline := make([]at, 1024)
		var s State
		now := benchStart
		for i := range timeline {
			now += int64(7 * time.Millisecond)
			s, _ = l.Decide(s, now, int64(1+i&2))
			timeline[i] = at{s, now + int64(time.Millisecond)}
		}
		b.Run(alg.String()+"/charge", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				a := &timeline[i&1023]
				_, _ = l.Decide(a.s, a.now, 1)
			}
		})
		b.Run(alg.String()+"/check", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				a := &timeline[i&1023]
				_ = l.Check(a.s, a.now)
			}
		})
	}
}

// BenchmarkOverdraft charges as BenchmarkDecide does, with overdraft
// charges (cost 1 and 3), refunding now and then so that the bucket is in
// and out of debt.
func BenchmarkOverdraft(b *testing.B) {
	for _, alg := range Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimit(b, alg)
			var s State
			now := benchStart
			for i := 0; b.Loop(); i++ {
				now += int64(7 * time.Millisecond)
				s, _ = l.Overdraft(s, now, int64(1+i&2))
				if i%16 == 0 {
					s, _ = l.Refund(s, now, 10)
				}
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

// BenchmarkInFlight compares a concurrency's charges and releases with a
// token bucket's charges and refunds on one timeline where both admit: 100
// at once (a burst of 100 refilled over a minute for the bucket), a call
// every 7ms, charges and refunds of 1 in turn.
func BenchmarkInFlight(b *testing.B) {
	for _, alg := range []Algorithm{TokenBucket, Concurrency} {
		b.Run(alg.String(), func(b *testing.B) {
			burst := int64(0)
			if alg.usesBurst() {
				burst = 100
			}
			l, err := NewLimit(alg, 100, time.Minute, burst)
			if err != nil {
				b.Fatal(err)
			}
			var s State
			now := benchStart
			admitted := 0
			for i := 0; b.Loop(); i++ {
				now += int64(7 * time.Millisecond)
				var d Decision
				if i%2 == 0 {
					s, d = l.Decide(s, now, 1)
				} else {
					s, d = l.Refund(s, now, 1)
				}
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
