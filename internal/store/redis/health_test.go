package redis_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestHealthReports: OnHealth's calls alternate, the first saying down (a
// store starts up), and the last one is the store's health — however fast
// Redis flaps, however many requests see it, however slow OnHealth is.
func TestHealthReports(t *testing.T) {
	l := mustLimit(t, algorithms.FixedWindow, 1_000_000, time.Hour, 0)
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "health"), Limit: l, Cost: 1}
	tests := []struct {
		name    string
		callers int // requests in flight at once while Redis flaps
		changes int // of Redis: down, up, down...
		want    []bool
	}{
		{"one caller, back up", 1, 20, []bool{false, true}},
		{"concurrent callers, back up", 8, 20, []bool{false, true}},
		{"one caller, down again", 1, 21, []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.StartProxy(t, srv.Addr())
			reports := make(chan bool) // OnHealth waits until the test reads its report
			// (A breaker that never opens: every flap reaches Redis.
			// TestBreakerWithHungRedis tests the breaker.)
			s := newGuardedStore(t, redis.Config{Addr: proxy.Addr()}, guard.Config{BreakerFailures: 1 << 30, OnHealth: func(up bool, _ error) { reports <- up }}, clock.NewFake(t0))

			// Redis goes away and comes back while OnHealth is stuck in
			// its first call; every change is seen by a request.
			for i := range tt.changes {
				proxy.SetDown(i%2 == 0)
				var wg sync.WaitGroup
				for range tt.callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						d := make([]algorithms.Decision, 1)
						if err := s.Apply(context.Background(), []store.Charge{charge}, d); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
				if up, _ := s.Healthy(); up != (i%2 == 1) {
					t.Fatalf("change %d: Healthy() = %v with Redis %s", i, up, map[bool]string{false: "up", true: "down"}[i%2 == 0])
				}
			}

			// Read the reports until none has come for a while after one
			// that says the store's health.
			var got []bool
			deadline := time.Now().Add(10 * time.Second)
			for {
				select {
				case up := <-reports:
					got = append(got, up)
					continue
				case <-time.After(300 * time.Millisecond):
				}
				if up, _ := s.Healthy(); len(got) > 0 && got[len(got)-1] == up || time.Now().After(deadline) {
					break
				}
			}
			if len(got) == 0 || got[0] {
				t.Fatalf("OnHealth saw %v; want the first report down", got)
			}
			for i := 1; i < len(got); i++ {
				if got[i] == got[i-1] {
					t.Fatalf("OnHealth saw %v: the same health twice in a row", got)
				}
			}
			if up, _ := s.Healthy(); got[len(got)-1] != up {
				t.Fatalf("OnHealth saw %v last, but the store is %v", got, up)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("OnHealth saw %v; a slow OnHealth should see the flapping in between coalesced into %v", got, tt.want)
			}
		})
	}
}

// TestStartsUp: a store starts up, as nothing has failed yet; Run pings
// Redis as soon as it starts, so that a Redis that is down is reported
// without waiting an interval (here an hour) or a request.
func TestStartsUp(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	proxy.SetDown(true)
	failures := make(chan error, 1)
	s := newGuardedStore(t, redis.Config{Addr: proxy.Addr()}, guard.Config{OnHealth: func(up bool, err error) {
		if !up {
			failures <- err
		}
	}}, nil)
	if up, why := s.Healthy(); !up {
		t.Fatalf("a new store is down (%s) before any exchange with Redis", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Hour); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case err := <-failures:
		if err == nil {
			t.Fatal("OnHealth reported down with no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not find Redis down when it started")
	}
	if up, _ := s.Healthy(); up {
		t.Fatal("Healthy() true after Run found Redis down")
	}
}
