package algorithms

import (
	"fmt"
	"testing"
)

// refundAtModel is a model that refunds units to the instant they were
// charged at.
type refundAtModel interface {
	model
	refundAt(now, units, chargedAt int64) Decision
}

// On random timelines of charges and refunds that name when their units
// were charged (an admitted charge's instant, or any earlier or later
// one), the windows and Concurrency agree with the models decision by
// decision: a refund goes to the window (generation) it was charged in, or
// nowhere.
func TestRandomRefundAt(t *testing.T) {
	const steps = 3000
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, Concurrency} {
		for i, spec := range specs(alg) {
			t.Run(fmt.Sprintf("%v/%d per %v", alg, spec.requests, spec.period), func(t *testing.T) {
				l := mustLimit(t, alg, spec.requests, spec.period, spec.burst)
				gen := arrivals{newRand(uint64(alg)<<8 | uint64(i) | 2<<16), l}
				m := newModel(l).(refundAtModel)
				var (
					s       State
					now     = t0 + gen.rng.Int64N(int64(day))
					charged []int64
					gave    int
				)
				for n := range steps {
					now += gen.gap()
					cost := gen.cost()
					var d, want Decision
					var next State
					what := "decide"
					if len(charged) > 0 && gen.rng.IntN(3) == 0 {
						at := charged[gen.rng.IntN(len(charged))]
						if gen.rng.IntN(8) == 0 {
							at -= gen.rng.Int64N(2 * l.period)
						}
						what = fmt.Sprintf("refund charged at %d", at)
						next, d = l.RefundAt(s, now, cost, at)
						want = m.refundAt(now, cost, at)
						if d.Remaining > 0 && cost > 0 {
							gave++
						}
					} else {
						next, d = l.Decide(s, now, cost)
						want = m.decide(now, cost)
						if d.Code == Allowed && cost > 0 {
							charged = append(charged, now)
						}
					}
					if alg != Concurrency {
						want.ResetAfter, want.RetryAfter = d.ResetAfter, d.RetryAfter
					}
					if d != want {
						t.Fatalf("step %d, %s (now %d, cost %d):\n got %+v\nmodel %+v", n, what, now, cost, d, want)
					}
					s = next
				}
				if gave == 0 {
					t.Fatal("no refund gave anything back")
				}
			})
		}
	}
}

// The example: on a limit of 10 a second, 10 reserved at 0.9 s,
// 5 used by others at 1.5 s, the 10 given back right after: 5 are left, on
// both windows. Without the charge time, Refund gives back more.
func TestRefundAtAcrossWindow(t *testing.T) {
	for _, tc := range []struct {
		alg           Algorithm
		want, without int64
	}{
		{FixedWindow, 5, 10},
		{SlidingWindow, 5, 7},
	} {
		l := mustLimit(t, tc.alg, 10, sec, 0)
		reserve := t0 + int64(900*ms)
		s, _ := l.Decide(State{}, reserve, 10)
		s, _ = l.Decide(s, t0+int64(1500*ms), 5)
		_, d := l.RefundAt(s, t0+int64(1500*ms), 10, reserve)
		_, dw := l.Refund(s, t0+int64(1500*ms), 10)
		// Without the charge time, a sliding window takes 5 off the current
		// window and 5 off the previous one, which weighs half at 1.5 s.
		if d.Remaining != tc.want || dw.Remaining != tc.without {
			t.Errorf("%v: RefundAt leaves %d (want %d), Refund %d (want %d)", tc.alg, d.Remaining, tc.want, dw.Remaining, tc.without)
		}
	}
}
