package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// TestCluster runs against one three-node Redis Cluster, made with
// redis-cli --cluster create: the conformance suite with the domain hash
// tag (each request one script on one node) and with keys spread over the
// slots (each request one script per slot, undone where another denied).
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	for _, spread := range []bool{false, true} {
		name := "domain hash tag"
		if spread {
			name = "spread keys"
		}
		t.Run(name+"/conformance", func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, c *clock.Fake) store.Store {
				return newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs(), SpreadKeys: spread}, c)
			}, storetest.Options{RandomRequests: 500})
		})
	}

	t.Run("round trips", func(t *testing.T) {
		l := mustLimit(t, algorithms.TokenBucket, 1000, time.Hour, 0)
		charges := make([]store.Charge, 12)
		for i := range charges {
			charges[i] = store.Charge{Domain: "shop", Key: engineKey("shop", "user", fmt.Sprint(i)), Limit: l, Cost: 1}
		}
		tagged := newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs()}, nil)
		apply(t, tagged, charges...) // learns the slots, loads the script
		before := tagged.RoundTrips()
		apply(t, tagged, charges...)
		if got := tagged.RoundTrips() - before; got != 1 {
			t.Errorf("hash-tagged: a request of 12 charges took %d round trips, want 1", got)
		}

		spread := newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs(), SpreadKeys: true}, nil)
		apply(t, spread, charges...)
		before = spread.RoundTrips()
		apply(t, spread, charges...)
		if got := spread.RoundTrips() - before; got != 3 {
			t.Errorf("spread over three nodes: a request of 12 charges took %d round trips, want 3 (one per node)", got)
		}
	})

	t.Run("spread keys: a denial on one slot undoes the others", func(t *testing.T) {
		c := clock.NewFake(t0)
		s := newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs(), SpreadKeys: true}, c)
		wide := mustLimit(t, algorithms.TokenBucket, 100, time.Minute, 0)
		narrow := mustLimit(t, algorithms.FixedWindow, 2, time.Minute, 0)
		var keys [][]byte
		for i := range 4 { // spread over the slots
			keys = append(keys, engineKey("shop", "k", fmt.Sprint(i)))
		}
		req := []store.Charge{
			{Domain: "shop", Key: keys[0], Limit: wide, Cost: 1},
			{Domain: "shop", Key: keys[1], Limit: wide, Cost: 1},
			{Domain: "shop", Key: keys[2], Limit: narrow, Cost: 1},
			{Domain: "shop", Key: keys[3], Limit: wide, Cost: 1},
		}
		admitted := 0
		for range 5 {
			d := apply(t, s, req...)
			if d[2].Code == algorithms.Allowed {
				admitted++
				continue
			}
			for _, i := range []int{0, 1, 3} {
				if d[i].Code != algorithms.Allowed || d[i].Remaining != int64(100-admitted) {
					t.Errorf("denied request, charge %d: %+v, want a peek with %d remaining", i, d[i], 100-admitted)
				}
			}
		}
		if admitted != 2 {
			t.Fatalf("admitted %d requests, want 2", admitted)
		}
		peek := apply(t, s, store.Charge{Domain: "shop", Key: keys[0], Limit: wide}, store.Charge{Domain: "shop", Key: keys[1], Limit: wide}, store.Charge{Domain: "shop", Key: keys[3], Limit: wide})
		for i, d := range peek {
			if d.Remaining != 98 {
				t.Errorf("bucket %d has %d remaining after 2 admitted and 3 denied requests, want 98", i, d.Remaining)
			}
		}
	})

	t.Run("Redis Cluster TIME", func(t *testing.T) {
		s := newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs()}, nil)
		l := mustLimit(t, algorithms.FixedWindow, 2, time.Hour, 0)
		key := engineKey("shop", "user", "carol")
		for i, want := range []algorithms.Code{algorithms.Allowed, algorithms.Allowed, algorithms.Denied} {
			d := make([]algorithms.Decision, 1)
			if err := s.Apply(context.Background(), []store.Charge{{Domain: "shop", Key: key, Limit: l, Cost: 1}}, d); err != nil {
				t.Fatal(err)
			}
			if d[0].Code != want {
				t.Fatalf("charge %d: %+v, want %v", i, d[0], want)
			}
		}
	})
}
