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

// On the buckets, RefundAt gives back the charge's time cost less the time
// since it: the bucket as if the charge had not been made when it was
// charged on a full bucket, less when the bucket was in use (the backlog
// ahead of the charge drained first, which the refund does not credit),
// and never more than not charging would have left.
func TestRefundAtBucket(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, LeakyBucketQueue} {
		l := mustLimit(t, alg, 10, sec, 10)
		for _, tc := range []struct {
			name      string
			before    int64 // charged at t0 - 0.2 s
			at        int64 // the refund's now, after t0
			want      int64 // Remaining after the refund
			unchanged bool  // the refund gives nothing back
		}{
			{"at once", 0, 0, 10, false},
			{"0.3s later", 0, int64(300 * ms), 10, false},
			// 0.2 s of backlog ahead of the charge at t0, 0.1 s of it left
			// at the refund: 0.5 s given back, 0.2 s left, 8; not
			// charging would have left 9.
			{"on a bucket used before", 4, int64(100 * ms), 8, false},
			{"once drained", 0, int64(1500 * ms), 10, true},
			{"later than its drain, with other use", 4, int64(1100 * ms), 10, true},
		} {
			var s State
			if tc.before > 0 {
				s, _ = l.Decide(s, t0-int64(200*ms), tc.before)
			}
			s, d := l.Decide(s, t0, 6)
			if d.Code != Allowed {
				t.Fatalf("%v %s: charge of 6 denied: %+v", alg, tc.name, d)
			}
			next, got := l.RefundAt(s, t0+tc.at, 6, t0)
			if got.Remaining != tc.want || (next == s) != tc.unchanged {
				t.Errorf("%v %s: %d left (state unchanged: %v), want %d (%v)", alg, tc.name, got.Remaining, next == s, tc.want, tc.unchanged)
			}
			// Never more than not charging would have left.
			var u State
			if tc.before > 0 {
				u, _ = l.Decide(u, t0-int64(200*ms), tc.before)
			}
			if _, p := l.Decide(u, t0+tc.at, 0); got.Remaining > p.Remaining {
				t.Errorf("%v %s: %d left, more than the %d without the charge", alg, tc.name, got.Remaining, p.Remaining)
			}
		}
	}
}
