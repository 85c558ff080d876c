package redis_test

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// TestQuotasOneRoundTrip: a request whose quotas meet a spent one — the
// request a retry used to settle twice — is settled in one script, one
// round trip to Redis, and admitted on the quota with room.
func TestQuotasOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestStore(t, redis.Config{Addr: srv.Addr()}, clock.NewFake(storetest.T0))
	l := storetest.MustLimit(t, algorithms.FixedWindow, 1, time.Hour, 0)
	charge := func(key string, quota uint32) store.Charge {
		return store.Charge{Domain: "q", Key: []byte(key), Limit: l, Cost: 1, Quota: quota}
	}
	storetest.Apply(t, s, charge("default", 0)) // spent
	trips, applies := s.RoundTrips(), s.Applies()
	d := storetest.Apply(t, s, charge("tenant", 1), charge("default", 2), charge("global", 0))
	if d[0].Code != algorithms.Allowed || d[1].Code != algorithms.Denied || d[2].Code != algorithms.Allowed {
		t.Errorf("decisions %+v: want the tenant's quota and global allowed, the default quota denied", d)
	}
	if got := s.RoundTrips() - trips; got != 1 || s.Applies()-applies != 1 {
		t.Errorf("%d round trips for %d applies, want 1 for 1", got, s.Applies()-applies)
	}
}
