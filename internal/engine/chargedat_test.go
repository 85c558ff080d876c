package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// TestChargedAt: every decided status reports the store's instant, and a
// refund that passes it back goes to the window the units were charged
// in: within it the units come back, after its end nothing does.
func TestChargedAt(t *testing.T) {
	e, clk := opEngine(t)
	one := func(o Op, cost uint64, at time.Time) *Response {
		req := &Request{Domain: "ai", Descriptors: []Descriptor{{Entries: entries("requests", "u"), Op: o, Hits: &cost, ChargedAt: at}}}
		return decide(t, e, req)
	}
	clk.Set(t0 + int64(50*time.Second))
	r := one(OpCharge, 4, time.Time{})
	charged := r.Statuses[0].ChargedAt
	if !charged.Equal(time.Unix(0, t0+int64(50*time.Second))) {
		t.Fatalf("ChargedAt %v, want the store's now", charged)
	}
	clk.Set(t0 + int64(55*time.Second))
	check(t, "a refund of 2 in the window", one(OpRefund, 2, charged), algorithms.Allowed, want{algorithms.Allowed, 8, algorithms.Refund})
	clk.Set(t0 + int64(65*time.Second))
	one(OpCharge, 3, time.Time{})
	check(t, "a refund of 2 after the window's end", one(OpRefund, 2, charged), algorithms.Allowed, want{algorithms.Allowed, 7, algorithms.Refund})
	check(t, "without the charge time", one(OpRefund, 2, time.Time{}), algorithms.Allowed, want{algorithms.Allowed, 9, algorithms.Refund})
}

// TestChargedAtInvalid: a charge time on anything but a refund, one before
// the Unix epoch, or two charge times for one bucket make the request
// invalid, naming the field.
func TestChargedAtInvalid(t *testing.T) {
	e, _ := opEngine(t)
	at := time.Unix(0, t0)
	c := uint64(1)
	for _, tc := range []struct {
		name  string
		ds    []Descriptor
		field string
	}{
		{"on a charge", []Descriptor{{Entries: entries("requests", "u"), ChargedAt: at}}, "descriptors[0].charged_at"},
		{"on a check", []Descriptor{{Entries: entries("requests", "u"), Op: OpCheck, ChargedAt: at}}, "descriptors[0].charged_at"},
		{"before the epoch", []Descriptor{{Entries: entries("requests", "u"), Op: OpRefund, Hits: &c, ChargedAt: time.Unix(-1, 0)}}, "descriptors[0].charged_at"},
		{"two for one bucket", []Descriptor{
			{Entries: entries("requests", "u"), Op: OpRefund, Hits: &c, ChargedAt: at},
			{Entries: entries("requests", "u"), Op: OpRefund, Hits: &c, ChargedAt: at.Add(time.Second)},
		}, "descriptors[1].charged_at"},
	} {
		var resp Response
		err := e.ShouldRateLimit(context.Background(), &Request{Domain: "ai", Descriptors: tc.ds}, &resp)
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Field != tc.field {
			t.Errorf("%s: %v, want an InvalidError of %s", tc.name, err, tc.field)
		}
	}
}
