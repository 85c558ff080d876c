package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// tokenPolicy is a budget of 1000 tokens a minute that takes overdraft.
const tokenPolicy = `
domain: ai
descriptors:
  - key: tenant
    rate_limit: {name: tokens, unit: minute, requests_per_unit: 1000, overdraft: true}
`

var acme = client.NewDescriptor("tenant", "acme")

// remaining checks (OPERATION_CHECK) the budget and returns what is left
// and whether a charge of 1 would be admitted.
func remaining(t *testing.T, c *client.Client) (uint64, bool) {
	t.Helper()
	d, err := c.Charge(context.Background(), "ai", acme.WithOperation(ratelimitv1.Operation_OPERATION_CHECK))
	if err != nil || d.Source != client.SourceService {
		t.Fatalf("check: %v %v", d, err)
	}
	return d.Response.GetStatuses()[0].GetRemaining(), d.Allowed
}

func reserve(t *testing.T, c *client.Client, estimate uint32) *client.Reservation {
	t.Helper()
	r, err := c.Reserve(context.Background(), estimate, "ai", acme)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func wantLeft(t *testing.T, c *client.Client, step string, left uint64, allowed bool) {
	t.Helper()
	if got, ok := remaining(t, c); got != left || ok != allowed {
		t.Errorf("%s: %d left (check admitted: %v), want %d (%v)", step, got, ok, left, allowed)
	}
}

// TestReservation: Reserve admits or denies an estimate as a charge that
// must fit; Settle charges the difference in full or refunds it; Cancel
// refunds it all; each settles once.
func TestReservation(t *testing.T) {
	d := daemontest.Start(t, tokenPolicy)
	var n calls
	c := newClient(t, d.GRPCAddr(), n.option())
	ctx := context.Background()

	r := reserve(t, c, 300)
	if !r.Allowed || r.Source != client.SourceService {
		t.Fatalf("a reservation of 300 in 1000: %v", r.Decision)
	}
	wantLeft(t, c, "reserved 300", 700, true)
	if s, err := r.Settle(ctx, 450); err != nil || !s.Allowed || s.Overdrew {
		t.Fatalf("settle 450: %v %v", s, err)
	}
	wantLeft(t, c, "settled at 450", 550, true)
	if _, err := r.Settle(ctx, 450); !errors.Is(err, client.ErrSettled) {
		t.Errorf("a second Settle: %v, want ErrSettled", err)
	}
	if _, err := r.Cancel(ctx); !errors.Is(err, client.ErrSettled) {
		t.Errorf("Cancel after Settle: %v, want ErrSettled", err)
	}

	// An estimate that does not fit is denied, though the budget takes
	// overdraft: a reservation must fit. It holds nothing.
	denied := reserve(t, c, 600)
	if denied.Allowed || denied.RetryAfter != time.Minute || denied.Policy != "tokens" {
		t.Fatalf("a reservation of 600 with 550 left: %v", denied.Decision)
	}
	if _, err := denied.Settle(ctx, 10); !errors.Is(err, client.ErrNotReserved) {
		t.Errorf("Settle of a denied reservation: %v, want ErrNotReserved", err)
	}
	wantLeft(t, c, "after a denied reservation", 550, true)

	// Used more than left: charged in full, 250 in debt; checks and
	// reservations are denied until the window ends.
	r = reserve(t, c, 500)
	s, err := r.Settle(ctx, 800)
	if err != nil || s.Allowed || !s.Overdrew || !s.Response.GetStatuses()[0].GetOverdrew() {
		t.Fatalf("settle 800 of 500 with 50 left: %+v %v; want the overdraft charged, reported denied and overdrawn", s, err)
	}
	if s.Debt != 250 || s.Response.GetStatuses()[0].GetDebt() != 250 {
		t.Errorf("settle 800 of 500 with 50 left: debt %d (status %d), want 250", s.Debt, s.Response.GetStatuses()[0].GetDebt())
	}
	wantLeft(t, c, "in debt", 0, false)
	if r := reserve(t, c, 1); r.Allowed {
		t.Errorf("a reservation of 1 in debt was admitted")
	}
	d.Clock.Advance(time.Minute)
	wantLeft(t, c, "the next window", 1000, true)

	// Cancel gives it all back; settling for less refunds the rest; settling
	// for the estimate sends nothing and answers with the reservation's own
	// decision, which admitted it.
	r = reserve(t, c, 200)
	if _, err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	wantLeft(t, c, "cancelled", 1000, true)
	r = reserve(t, c, 100)
	if _, err := r.Settle(ctx, 40); err != nil {
		t.Fatal(err)
	}
	wantLeft(t, c, "settled for 40 of 100", 960, true)
	r = reserve(t, c, 60)
	before := n.n.Load()
	if s, err := r.Settle(ctx, 60); err != nil || !s.Allowed || s.Source != client.SourceService || s.Response != r.Response || s.Overdrew {
		t.Fatalf("settle at the estimate: %+v %v; want the reservation's decision, allowed", s, err)
	}
	if n.n.Load() != before {
		t.Errorf("settling at the estimate made a call")
	}
	wantLeft(t, c, "settled at the estimate", 900, true)
}

// TestReservationFailOpen: a reservation the failure policy admitted holds
// nothing, and its Settle stays open until the service answers.
func TestReservationFailOpen(t *testing.T) {
	d := daemontest.Start(t, tokenPolicy)
	addr := d.GRPCAddr()
	d.Stop()
	c := newClient(t, addr, client.WithTimeout(200*time.Millisecond))
	r := reserve(t, c, 100)
	if !r.Allowed || r.Source != client.SourceFailOpen {
		t.Fatalf("reserve with the service down: %v", r.Decision)
	}
	s, err := r.Settle(context.Background(), 70)
	if err != nil || s.Source != client.SourceFailOpen {
		t.Fatalf("settle with the service down: %v %v", s, err)
	}
	if _, err := r.Settle(context.Background(), 70); errors.Is(err, client.ErrSettled) {
		t.Errorf("a Settle the service never answered closed the reservation")
	}
}

// windowPolicy: 10 a second, on a fixed window and on a sliding one.
const windowPolicy = `
domain: api
descriptors:
  - key: fixed
    rate_limit: {name: fixed, algorithm: fixed_window, unit: second, requests_per_unit: 10}
  - key: sliding
    rate_limit: {name: sliding, algorithm: sliding_window, unit: second, requests_per_unit: 10}
`

// TestReservationCancelAcrossWindow is issue 34's example: on a limit of
// 10 a second, 10 reserved at 0.9 s, 5 used by others at 1.5 s, the
// reservation cancelled: 5 are left, on a fixed window and a sliding one.
// The refund goes to the window the estimate was charged in, which has
// passed, so nothing comes back to the window the others used; a refund
// without the charge time would leave 10 (fixed) or 7 (sliding).
func TestReservationCancelAcrossWindow(t *testing.T) {
	d := daemontest.Start(t, windowPolicy)
	c := newClient(t, d.GRPCAddr())
	ctx := context.Background()
	for _, key := range []string{"fixed", "sliding"} {
		t.Run(key, func(t *testing.T) {
			desc := client.NewDescriptor(key, "x")
			d.Clock.Set(daemontest.T0.Add(10*time.Second + 900*time.Millisecond).UnixNano())
			r, err := c.Reserve(ctx, 10, "api", desc)
			if err != nil || !r.Allowed {
				t.Fatalf("reserve 10: %v %v", r, err)
			}
			d.Clock.Set(daemontest.T0.Add(11*time.Second + 500*time.Millisecond).UnixNano())
			if o, err := c.Charge(ctx, "api", desc.WithHits(5)); err != nil || !o.Allowed {
				t.Fatalf("others use 5: %v %v", o, err)
			}
			cancel, err := r.Cancel(ctx)
			if err != nil || !cancel.Allowed {
				t.Fatalf("cancel: %v %v", cancel, err)
			}
			if left := cancel.Response.GetStatuses()[0].GetRemaining(); left != 5 {
				t.Errorf("after the cancel: %d left, want 5", left)
			}
		})
	}
}

// TestReservationSettleWithinWindow: a refund within the window the
// estimate was charged in gives the unused part back there.
func TestReservationSettleWithinWindow(t *testing.T) {
	d := daemontest.Start(t, windowPolicy)
	c := newClient(t, d.GRPCAddr())
	ctx := context.Background()
	desc := client.NewDescriptor("fixed", "x")
	d.Clock.Set(daemontest.T0.Add(100 * time.Millisecond).UnixNano())
	r, err := c.Reserve(ctx, 8, "api", desc)
	if err != nil || !r.Allowed {
		t.Fatalf("reserve 8: %v %v", r, err)
	}
	d.Clock.Set(daemontest.T0.Add(900 * time.Millisecond).UnixNano())
	s, err := r.Settle(ctx, 3)
	if err != nil || s.Response.GetStatuses()[0].GetRemaining() != 7 {
		t.Fatalf("settle 3 of 8: %v %v, want 7 left", s, err)
	}
}
