package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// TestRefundAcrossWindows is issue 34's example on Redis: 10 a second,
// 10 reserved at 0.9 s, 5 used by others at 1.5 s, the reservation
// cancelled with its charge time: 5 are left, on a fixed window and on a
// sliding one (without the charge time, 10 and 7: the refund goes to the
// window it arrives in). The reply's instant is the store's clock's.
func TestRefundAcrossWindows(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, tt := range []struct {
		alg                  algorithms.Algorithm
		exact, withoutCharge int64
	}{
		{algorithms.FixedWindow, 5, 10},
		{algorithms.SlidingWindow, 5, 7},
	} {
		for _, charged := range []bool{true, false} {
			name := tt.alg.String()
			if !charged {
				name += " without the charge time"
			}
			t.Run(name, func(t *testing.T) {
				clk := clock.NewFake(t0 + int64(900*time.Millisecond))
				s := newTestStore(t, redis.Config{Addr: srv.Addr()}, clk)
				l := mustLimit(t, tt.alg, 10, time.Second, 0)
				charge := func(kind algorithms.Kind, cost, at int64) algorithms.Decision {
					t.Helper()
					d, decided := storetest.ApplyAt(t, s, store.Charge{Domain: "ai", Key: engineKey("ai", name), Limit: l, Cost: cost, Kind: kind, ChargedAt: at})
					d[0].At = decided
					return d[0]
				}
				reserved := charge(algorithms.Admit, 10, 0)
				if reserved.Code != algorithms.Allowed || reserved.At != clk.Now() {
					t.Fatalf("reserving 10: %+v, want allowed at %d", reserved, clk.Now())
				}
				clk.Set(t0 + int64(1500*time.Millisecond))
				if d := charge(algorithms.Admit, 5, 0); d.Code != algorithms.Allowed || d.At != clk.Now() {
					t.Fatalf("others using 5: %+v, want allowed at %d", d, clk.Now())
				}
				at, want := reserved.At, tt.exact
				if !charged {
					at, want = 0, tt.withoutCharge
				}
				if d := charge(algorithms.Refund, 10, at); d.Remaining != want {
					t.Errorf("cancelling the reservation: %+v, want %d left", d, want)
				}
				if d := charge(algorithms.Check, 1, 0); d.Remaining != want {
					t.Errorf("a check after it: %+v, want %d left", d, want)
				}
			})
		}
	}
}

// TestDecisionAt: on Redis TIME, a decision is reported at the instant the
// script read, between the TIME before and after the request.
func TestDecisionAt(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	s := newTestStore(t, redis.Config{Addr: srv.Addr()}, nil)
	for _, alg := range algorithms.Algorithms() {
		l := mustLimit(t, alg, 5, time.Minute, 0)
		before := redisNow(t, admin)
		_, at := storetest.ApplyAt(t, s, store.Charge{Domain: "ai", Key: engineKey("ai", alg.String()), Limit: l, Cost: 1})
		after := redisNow(t, admin)
		if at < before || at > after {
			t.Errorf("%v: decided at %d, want between %d and %d (Redis TIME)", alg, at, before, after)
		}
	}
}
