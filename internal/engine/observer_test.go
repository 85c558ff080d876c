package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// TestObserver: the observer sees every decided request once, with the
// response the caller gets, and never an invalid one.
func TestObserver(t *testing.T) {
	type seen struct {
		domain string
		code   algorithms.Code
		costs  []int64
	}
	var got []seen
	e := newEngine(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
`, WithObserver(func(_ context.Context, req *Request, resp *Response, took time.Duration) {
		s := seen{domain: req.Domain, code: resp.Code}
		for _, st := range resp.Statuses {
			s.costs = append(s.costs, st.Cost)
		}
		if took < 0 {
			t.Errorf("took %v", took)
		}
		got = append(got, s)
	}))

	two, zero := uint64(2), uint64(0)
	calls := []*Request{
		{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k", "a")}}},
		{Domain: "d", Hits: 2, Descriptors: []Descriptor{{Entries: entries("k", "a")}, {Entries: entries("k", "b"), Hits: &zero}}},
		{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k", "a"), Hits: &two}}},
		{Domain: "", Descriptors: []Descriptor{{Entries: entries("k", "a")}}}, // invalid
		{Domain: "elsewhere", Descriptors: []Descriptor{{Entries: entries("k", "a")}}},
	}
	for _, req := range calls {
		var resp Response
		err := e.ShouldRateLimit(context.Background(), req, &resp)
		var inv *InvalidError
		if err != nil && !errors.As(err, &inv) {
			t.Fatal(err)
		}
	}
	want := []seen{
		{"d", algorithms.Allowed, []int64{1}},
		{"d", algorithms.Allowed, []int64{2, 0}},
		{"d", algorithms.Denied, []int64{2}}, // 3 of 3 spent: asks 2, is charged none
		{"elsewhere", algorithms.Allowed, []int64{1}},
	}
	if len(got) != len(want) {
		t.Fatalf("observed %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].domain != want[i].domain || got[i].code != want[i].code || !slices.Equal(got[i].costs, want[i].costs) {
			t.Errorf("observation %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
