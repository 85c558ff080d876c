package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// runningTotal is envoyproxy/ratelimit's answer to descriptors that name
// one bucket, written out the obvious way: it increments the bucket's
// counter by each descriptor's hits in request order (one INCRBY each, in
// one pipeline), and each descriptor is over the limit iff the counter
// after its own increment is; within the limit, what is left is the
// limit minus that counter. With all or nothing (DESIGN.md) ratelimitd
// then charges the request only when every descriptor is within the
// limit — iff the last one is — and reports a denied request's
// descriptors that were within the limit as what the bucket holds,
// uncharged. (A running total above the limit by itself is over capacity:
// no wait admits it.)
type runningTotal struct{ count, limit int64 }

func (m *runningTotal) request(costs []int64) (codes []algorithms.Code, remaining []int64) {
	run := m.count
	admitted := true
	var totals []int64
	for _, c := range costs {
		run += c
		totals = append(totals, run)
		admitted = run <= m.limit
	}
	for _, total := range totals {
		switch {
		case total-m.count > m.limit: // never: more than the limit by itself
			codes, remaining = append(codes, algorithms.OverCapacity), append(remaining, max(m.limit-m.count, 0))
		case total > m.limit:
			codes, remaining = append(codes, algorithms.Denied), append(remaining, max(m.limit-m.count, 0))
		case admitted:
			codes, remaining = append(codes, algorithms.Allowed), append(remaining, m.limit-total)
		default:
			codes, remaining = append(codes, algorithms.Allowed), append(remaining, m.limit-m.count)
		}
	}
	if admitted {
		m.count = run
	}
	return codes, remaining
}

// TestSameBucketTwice: descriptors naming one bucket are decided on the
// running total, as upstream decides them; the request is charged their
// summed cost, all or nothing.
func TestSameBucketTwice(t *testing.T) {
	const policy = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	tests := []struct {
		name   string
		before int64 // hits counted first
		costs  []int64
	}{
		{"both fit", 0, []int64{3, 4}},
		{"the second does not fit", 6, []int64{3, 4}},
		{"neither fits", 8, []int64{3, 4}},
		{"to the last unit", 3, []int64{3, 4}},
		{"three, the last one over", 2, []int64{3, 3, 3}},
		{"a peek between", 5, []int64{2, 0, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, policy)
			m := &runningTotal{limit: 10}
			if tt.before > 0 {
				sameBucket(t, e, tt.before)
				m.request([]int64{tt.before})
			}
			wantCodes, wantRemaining := m.request(tt.costs)
			r := sameBucket(t, e, tt.costs...)
			for i, st := range r.Statuses {
				if st.Code != wantCodes[i] || st.Remaining != wantRemaining[i] {
					t.Errorf("descriptor %d (cost %d): %v, %d remaining; want %v, %d", i, tt.costs[i], st.Code, st.Remaining, wantCodes[i], wantRemaining[i])
				}
			}
			// What was charged: the next peek's remaining.
			if got := sameBucket(t, e, 0).Statuses[0].Remaining; got != m.limit-m.count {
				t.Errorf("after the request %d remaining, want %d", got, m.limit-m.count)
			}
		})
	}

	// Random requests of two to four descriptors on one bucket.
	rng := rand.New(rand.NewPCG(30, 2))
	e := newEngine(t, policy)
	m := &runningTotal{limit: 10}
	for n := range 2000 {
		costs := make([]int64, 2+rng.IntN(3))
		for i := range costs {
			costs[i] = rng.Int64N(5)
		}
		if rng.IntN(10) == 0 {
			// A new window.
			e = newEngine(t, policy)
			m = &runningTotal{limit: 10}
		}
		wantCodes, wantRemaining := m.request(costs)
		r := sameBucket(t, e, costs...)
		for i, st := range r.Statuses {
			if st.Code != wantCodes[i] || st.Remaining != wantRemaining[i] {
				t.Fatalf("request %d %v, descriptor %d: %v, %d remaining; want %v, %d", n, costs, i, st.Code, st.Remaining, wantCodes[i], wantRemaining[i])
			}
		}
	}
}

// sameBucket asks one request whose descriptors all name the bucket k=v,
// at the costs given.
func sameBucket(t *testing.T, e *Engine, costs ...int64) *Response {
	t.Helper()
	req := &Request{Domain: "d"}
	for _, c := range costs {
		hits := uint64(c)
		req.Descriptors = append(req.Descriptors, Descriptor{Entries: entries("k", "v"), Hits: &hits})
	}
	return decide(t, e, req)
}

// TestSameQuotaTwice: two quota_mode descriptors naming one bucket, as two
// QuotaPolicies on one backend and model make Envoy AI Gateway send, are
// one quota charged once — AI Gateway promises the first policy alone
// applies — where upstream increments the counter once per naming: 9 of 10
// used and the quota named twice at 1 admits, both statuses OK with 0
// left, and 1 is charged. Named twice at different costs, it is two
// namings, one quota charge of their summed cost.
func TestSameQuotaTwice(t *testing.T) {
	e := newEngine(t, `
domain: d
descriptors:
  - key: k
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	sameBucket(t, e, 9)
	r := sameBucket(t, e, 1, 1)
	got := fmt.Sprintf("%v: %v %d, %v %d", r.Code, r.Statuses[0].Code, r.Statuses[0].Remaining, r.Statuses[1].Code, r.Statuses[1].Remaining)
	if want := "allowed: allowed 0, allowed 0"; got != want {
		t.Errorf("9 of 10 used, one quota named twice at 1: %s, want %s", got, want)
	}
	if got := sameBucket(t, e, 0).Statuses[0].Remaining; got != 0 {
		t.Errorf("after it, %d remaining, want 0 (charged once)", got)
	}
	if r := sameBucket(t, e, 1, 1); r.Code != algorithms.Denied || r.Statuses[0].Code != algorithms.Denied || r.Statuses[1].Code != algorithms.Denied {
		t.Errorf("the quota spent, named twice: %+v, want both denied and the request", r)
	}

	// Different costs are two namings, charged together.
	e = newEngine(t, `
domain: d
descriptors:
  - key: k
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	sameBucket(t, e, 7)
	r = sameBucket(t, e, 1, 2)
	if r.Code != algorithms.Allowed || r.Statuses[0].Remaining != 0 || r.Statuses[1].Remaining != 0 {
		t.Errorf("7 of 10 used, the quota named at 1 then 2: %+v, want allowed, 0 left for both (3 charged)", r)
	}
}
