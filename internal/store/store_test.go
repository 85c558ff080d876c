package store_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// now is the start of a minute, so a fixed window of a minute has a whole
// minute left.
const now = int64(1767225600) * int64(time.Second)

func TestSettleCombiningRule(t *testing.T) {
	window, err := algorithms.NewLimit(algorithms.FixedWindow, 10, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 1 token per second, 10 at most.
	bucket, err := algorithms.NewLimit(algorithms.TokenBucket, 1, time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	type charge struct {
		kind   algorithms.Kind
		limit  *algorithms.Limit
		used   int64 // charged (as an overdraft) before the request
		cost   int64
		shadow bool
	}
	type want struct {
		code       algorithms.Code
		remaining  int64
		retryAfter time.Duration
		applied    bool
		left       int64 // Remaining of a peek on the state stored afterwards
	}
	const (
		ok     = algorithms.Allowed
		denied = algorithms.Denied
		over   = algorithms.OverCapacity
	)
	tests := []struct {
		name     string
		charges  []charge
		admitted bool
		want     []want
	}{
		{
			name:     "a check of an unused bucket reports it uncharged",
			charges:  []charge{{kind: algorithms.Check, limit: &window, cost: 5}},
			admitted: true,
			want:     []want{{code: ok, remaining: 10, left: 10}},
		},
		{
			name:     "a check with one left is allowed and charges nothing",
			charges:  []charge{{kind: algorithms.Check, limit: &bucket, used: 9}},
			admitted: true,
			want:     []want{{code: ok, remaining: 1, left: 1}},
		},
		{
			name: "a check of a used-up bucket denies the request and its admits",
			charges: []charge{
				{kind: algorithms.Check, limit: &bucket, used: 10},
				{kind: algorithms.Admit, limit: &window, cost: 3},
			},
			want: []want{
				{code: denied, remaining: 0, retryAfter: time.Second},
				{code: ok, remaining: 10, left: 10},
			},
		},
		{
			name: "a check of a bucket in debt waits for the debt and one token",
			charges: []charge{
				{kind: algorithms.Check, limit: &bucket, used: 13},
			},
			want: []want{{code: denied, remaining: 0, retryAfter: 4 * time.Second}},
		},
		{
			name: "an overdraft that fits is an admit",
			charges: []charge{
				{kind: algorithms.Overdraft, limit: &window, used: 4, cost: 6},
				{kind: algorithms.Admit, limit: &bucket, cost: 2},
			},
			admitted: true,
			want: []want{
				{code: ok, remaining: 0, applied: true, left: 0},
				{code: ok, remaining: 8, applied: true, left: 8},
			},
		},
		{
			name: "an overdraft into debt is applied and denies the ordinary charges",
			charges: []charge{
				{kind: algorithms.Overdraft, limit: &window, used: 4, cost: 1200},
				{kind: algorithms.Admit, limit: &bucket, cost: 2},
			},
			want: []want{
				{code: denied, remaining: 0, retryAfter: time.Minute, applied: true, left: 0},
				{code: ok, remaining: 10, left: 10},
			},
		},
		{
			name: "an overdraft is applied when an admit denies the request",
			charges: []charge{
				{kind: algorithms.Overdraft, limit: &window, cost: 3},
				{kind: algorithms.Admit, limit: &bucket, used: 9, cost: 2},
			},
			want: []want{
				{code: ok, remaining: 7, applied: true, left: 7},
				{code: denied, remaining: 1, retryAfter: time.Second, left: 1},
			},
		},
		{
			name: "a refund is applied when an admit denies the request",
			charges: []charge{
				{kind: algorithms.Refund, limit: &window, used: 8, cost: 3},
				{kind: algorithms.Admit, limit: &bucket, cost: 11},
			},
			want: []want{
				{code: ok, remaining: 5, applied: true, left: 5},
				{code: over, remaining: 10, left: 10},
			},
		},
		{
			name: "a refund never goes past rest",
			charges: []charge{
				{kind: algorithms.Refund, limit: &bucket, used: 2, cost: 1 << 62},
			},
			admitted: true,
			want:     []want{{code: ok, remaining: 10, applied: true, left: 10}},
		},
		{
			name: "a refund out of debt",
			charges: []charge{
				{kind: algorithms.Refund, limit: &bucket, used: 14, cost: 6},
				{kind: algorithms.Admit, limit: &window, cost: 1},
			},
			admitted: true,
			want: []want{
				{code: ok, remaining: 2, applied: true, left: 2},
				{code: ok, remaining: 9, applied: true, left: 9},
			},
		},
		{
			name: "a shadow overdraft into debt is applied and denies nothing",
			charges: []charge{
				{kind: algorithms.Overdraft, limit: &window, cost: 11, shadow: true},
				{kind: algorithms.Admit, limit: &bucket, cost: 1},
			},
			admitted: true,
			want: []want{
				{code: denied, remaining: 0, retryAfter: time.Minute, applied: true, left: 0},
				{code: ok, remaining: 9, applied: true, left: 9},
			},
		},
		{
			name: "a denied shadow check denies nothing",
			charges: []charge{
				{kind: algorithms.Check, limit: &window, used: 10, shadow: true},
				{kind: algorithms.Admit, limit: &bucket, cost: 1},
			},
			admitted: true,
			want: []want{
				{code: denied, remaining: 0, retryAfter: time.Minute, left: 0},
				{code: ok, remaining: 9, applied: true, left: 9},
			},
		},
		{
			name: "a charge of 0 is a peek whatever the kind",
			charges: []charge{
				{kind: algorithms.Overdraft, limit: &window, used: 3},
				{kind: algorithms.Refund, limit: &bucket, used: 3},
				{kind: algorithms.Admit, limit: &bucket},
			},
			admitted: true,
			want: []want{
				{code: ok, remaining: 7, left: 7},
				{code: ok, remaining: 7, left: 7},
				{code: ok, remaining: 10, left: 10},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			charges := make([]store.Charge, len(tt.charges))
			states := make([]algorithms.State, len(tt.charges))
			for i, c := range tt.charges {
				charges[i] = store.Charge{Key: []byte{byte(i)}, Limit: c.limit, Cost: c.cost, Kind: c.kind, Shadow: c.shadow}
				states[i], _ = c.limit.Overdraft(algorithms.State{}, now, c.used)
			}
			before := append([]algorithms.State(nil), states...)
			decisions := make([]algorithms.Decision, len(charges))
			admitted := store.Settle(charges, states, now, decisions)
			if admitted != tt.admitted {
				t.Errorf("admitted %v, want %v", admitted, tt.admitted)
			}
			for i, w := range tt.want {
				d := decisions[i]
				if d.Code != w.code || d.Remaining != w.remaining || d.RetryAfter != w.retryAfter {
					t.Errorf("charge %d (%v): %v remaining %d retry after %v, want %v remaining %d retry after %v",
						i, charges[i].Kind, d.Code, d.Remaining, d.RetryAfter, w.code, w.remaining, w.retryAfter)
				}
				applied := charges[i].Applied(d, admitted)
				if applied != w.applied {
					t.Errorf("charge %d (%v): applied %v, want %v", i, charges[i].Kind, applied, w.applied)
				}
				stored := before[i]
				if applied {
					stored = states[i]
				} else if states[i] != before[i] {
					t.Errorf("charge %d (%v): not applied, but its state changed", i, charges[i].Kind)
				}
				if _, peek := charges[i].Limit.Decide(stored, now, 0); peek.Remaining != w.left {
					t.Errorf("charge %d (%v): %d left afterwards, want %d", i, charges[i].Kind, peek.Remaining, w.left)
				}
			}
		})
	}
}

// TestSettleModel holds Settle to a model of its rule written apart from it:
// each charge decided alone, then the request admitted iff no ordinary
// non-shadow charge is denied and, when it has quotas, one quota has every
// charge allowed (quotas as sets of charges); each state stored and each
// decision reported as the rule says. Random requests of up to six charges
// on random states, every kind, some shadow, quotas of one to three
// charges.
func TestSettleModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 1243))
	var limits []algorithms.Limit
	for _, alg := range algorithms.Algorithms() {
		burst := int64(0)
		if alg == algorithms.TokenBucket || alg == algorithms.LeakyBucket || alg == algorithms.LeakyBucketQueue {
			burst = 4
		}
		l, err := algorithms.NewLimit(alg, 3, time.Minute, burst)
		if err != nil {
			t.Fatal(err)
		}
		limits = append(limits, l)
	}
	kinds := []algorithms.Kind{algorithms.Admit, algorithms.Admit, algorithms.Check, algorithms.Overdraft, algorithms.Refund}
	admittedSeen, deniedByQuotas := 0, 0
	for n := range 20000 {
		count := 1 + rng.IntN(6)
		charges := make([]store.Charge, count)
		states := make([]algorithms.State, count)
		for i := range charges {
			l := &limits[rng.IntN(len(limits))]
			charges[i] = store.Charge{Key: []byte{byte(i)}, Limit: l, Cost: rng.Int64N(6), Kind: kinds[rng.IntN(len(kinds))],
				Shadow: rng.IntN(6) == 0}
			if rng.IntN(3) > 0 {
				charges[i].Quota = 1 + uint32(rng.IntN(3))
			}
			states[i], _ = l.Overdraft(algorithms.State{}, now-rng.Int64N(int64(time.Minute)), rng.Int64N(6))
		}
		before := append([]algorithms.State(nil), states...)

		// The model.
		alone := make([]algorithms.Decision, count)
		next := make([]algorithms.State, count)
		for i := range charges {
			next[i], alone[i] = charges[i].Decide(before[i], now)
		}
		ordinaryDenied := false
		quotaRoom := map[uint32]bool{} // quota → every charge allowed
		for i, c := range charges {
			denied := alone[i].Code != algorithms.Allowed
			switch {
			case c.Shadow:
			case c.Quota == 0:
				ordinaryDenied = ordinaryDenied || denied
			default:
				room, seen := quotaRoom[c.Quota]
				quotaRoom[c.Quota] = (room || !seen) && !denied
			}
		}
		someRoom := len(quotaRoom) == 0
		for _, room := range quotaRoom {
			someRoom = someRoom || room
		}
		wantAdmitted := !ordinaryDenied && someRoom
		if !ordinaryDenied && !someRoom {
			deniedByQuotas++
		}
		if wantAdmitted {
			admittedSeen++
		}

		decisions := make([]algorithms.Decision, count)
		admitted := store.Settle(charges, states, now, decisions)
		if admitted != wantAdmitted {
			t.Fatalf("request %d %+v: admitted %v, want %v", n, charges, admitted, wantAdmitted)
		}
		if got := store.QuotasDeny(charges, decisions); got != (len(quotaRoom) > 0 && !someRoom) {
			t.Fatalf("request %d: QuotasDeny %v over the reported decisions, want %v", n, got, !someRoom)
		}
		for i, c := range charges {
			wantState, wantDecision := before[i], alone[i]
			switch {
			case c.Cost <= 0 && c.Kind != algorithms.Check:
			case c.Kind == algorithms.Overdraft || c.Kind == algorithms.Refund:
				wantState = next[i]
			case c.Kind == algorithms.Admit && alone[i].Code == algorithms.Allowed:
				if wantAdmitted {
					wantState = next[i]
				} else {
					_, wantDecision = c.Limit.Decide(before[i], now, 0)
				}
			}
			stored := before[i]
			if c.Applied(decisions[i], admitted) {
				stored = states[i]
			}
			if stored != wantState || decisions[i] != wantDecision {
				t.Fatalf("request %d, charge %d (%v of %d, quota %d, shadow %v): stored %+v decided %+v, want %+v and %+v",
					n, i, c.Kind, c.Cost, c.Quota, c.Shadow, stored, decisions[i], wantState, wantDecision)
			}
		}
	}
	if admittedSeen < 2000 || deniedByQuotas < 500 {
		t.Fatalf("the random requests cover too little: %d admitted, %d denied by their quotas", admittedSeen, deniedByQuotas)
	}
}
