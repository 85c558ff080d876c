package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestHungRedisCallEnds: a request in flight to a Redis that holds every
// script (CLIENT PAUSE), with a timeout of a minute, ends as soon as its
// caller's context ends (with that context's error), or as soon as the
// store is closed (decided by the failure mode) — not when the timeout
// does. This is what bounds a daemon's shutdown while Redis hangs.
func TestHungRedisCallEnds(t *testing.T) {
	l := mustLimit(t, algorithms.FixedWindow, 10, time.Hour, 0)
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "hung"), Limit: l, Cost: 1}
	for _, how := range []string{"caller's context", "Close"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			s := newGuardedStore(t, redis.Config{Addr: srv.Addr(), Timeout: time.Minute}, guard.Config{FailureMode: guard.FailClosed}, nil)
			apply(t, s, charge) // loads the script
			pause(t, srv)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				d   algorithms.Decision
				err error
			}
			done := make(chan result, 1)
			asked := s.Applies()
			go func() {
				d := make([]algorithms.Decision, 1)
				err := s.Apply(ctx, []store.Charge{charge}, d)
				done <- result{d[0], err}
			}()
			for s.Applies() == asked { // the request is on its way to Redis
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			select {
			case r := <-done:
				t.Fatalf("Apply returned %+v, %v while Redis holds the script", r.d, r.err)
			default:
			}
			if how == "Close" {
				s.Close()
			} else {
				cancel()
			}
			select {
			case r := <-done:
				switch {
				case how == "Close" && (r.err != nil || r.d.Code != algorithms.Denied):
					t.Errorf("after Close: %+v, %v; want the failure mode's denial", r.d, r.err)
				case how != "Close" && !errors.Is(r.err, context.Canceled):
					t.Errorf("after the caller's cancel: %v, want context.Canceled", r.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the request did not end; it waits for the timeout of a minute")
			}
		})
	}
}
