package redis_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// TestCluster runs against one three-node Redis Cluster, made with
// redis-cli --cluster create: the conformance suite with the domain hash
// tag (each request one script on one node) and with keys spread over the
// slots (each request one script per slot, undone where another denied),
// and with fixed windows kept as counters (Config.Counters: keys without a
// tag, so in several slots).
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

	t.Run("counters/conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, c *clock.Fake) store.Store {
			return countingStore{newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs(), Counters: true}, c)}
		}, storetest.Options{RandomRequests: 500, ForwardOnly: true})
	})

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

	t.Run("a reply lost after its script ran: charged once, never sent again", func(t *testing.T) {
		// The proxy in front of the first bucket's node lets the script run,
		// then hangs up instead of replying. The request is decided by the
		// failure mode (open: as at rest), and Redis holds that script's
		// charge once: the client does not send it again. With spread keys
		// the other node's share is undone.
		standalone := redistest.Start(t)
		proxy := redistest.StartProxy(t, standalone.Addr())
		l := mustLimit(t, algorithms.FixedWindow, 10, time.Hour, 0)
		tests := []struct {
			name      string
			cfg       redis.Config
			wantAfter [2]int64 // the buckets' remaining afterwards
		}{
			{"standalone", redis.Config{Addr: proxy.Addr(), KeyPrefix: "lost1:"}, [2]int64{9, 9}},
			{"cluster, domain hash tag", redis.Config{ClusterAddrs: cluster.Addrs(), KeyPrefix: "lost2:"}, [2]int64{9, 9}},
			// The second bucket, on another node, is undone.
			{"cluster, spread keys", redis.Config{ClusterAddrs: cluster.Addrs(), KeyPrefix: "lost3:", SpreadKeys: true}, [2]int64{9, 10}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := newTestStore(t, tt.cfg, clock.NewFake(t0))
				var keys [][]byte
				var dropping *redistest.Proxy // in front of keys[0]'s node
				switch {
				case tt.cfg.Addr != "":
					keys, dropping = [][]byte{engineKey("shop", "a"), engineKey("shop", "b")}, proxy
				case !tt.cfg.SpreadKeys:
					keys = [][]byte{engineKey("shop", "a"), engineKey("shop", "b")}
					dropping = cluster.Proxies[cluster.Owner(t, tt.cfg.KeyPrefix+"{shop}"+string(keys[0]))]
				default:
					var nodes []int
					keys, nodes = onDistinctNodes(t, cluster, tt.cfg.KeyPrefix, 2)
					dropping = cluster.Proxies[nodes[0]]
				}
				charges := func(cost int64) []store.Charge {
					return []store.Charge{{Domain: "shop", Key: keys[0], Limit: l, Cost: cost}, {Domain: "shop", Key: keys[1], Limit: l, Cost: cost}}
				}
				apply(t, s, charges(0)...) // loads the script, learns the slots

				dropping.DropReply("evalsha")
				d := apply(t, s, charges(1)...)
				for i := range d {
					if want := (algorithms.Decision{Remaining: 9, ResetAfter: time.Hour}); d[i] != want {
						t.Errorf("charge %d of the request whose reply was lost: %+v, want the failure mode's %+v", i, d[i], want)
					}
				}
				for i, p := range apply(t, s, charges(0)...) {
					if p.Remaining != tt.wantAfter[i] {
						t.Errorf("bucket %d has %d remaining after the request whose reply was lost, want %d", i, p.Remaining, tt.wantAfter[i])
					}
				}
			})
		}
	})

	t.Run("spread keys: a node that times out", func(t *testing.T) {
		// A request charges three buckets on three nodes: the first is
		// charged on its node, the second's node may deny, and the third's
		// node holds scripts past the timeout. The charges made are undone;
		// when the second denies, the request is denied, and only the slow
		// node's charge is decided by the failure mode, as a denied
		// request's.
		wide := mustLimit(t, algorithms.FixedWindow, 10, time.Hour, 0)
		narrow := mustLimit(t, algorithms.FixedWindow, 1, time.Hour, 0)
		peek := func(remaining int64) algorithms.Decision { return algorithms.Decision{Remaining: remaining} }
		failClosed := algorithms.Decision{Code: algorithms.Denied, RetryAfter: guard.FailClosedRetryAfter}
		denial := algorithms.Decision{Code: algorithms.Denied, ResetAfter: time.Hour, RetryAfter: time.Hour}
		tests := []struct {
			name string
			mode guard.FailureMode
			deny bool // the second bucket is spent before the request
			want [3]algorithms.Decision
		}{
			{"fail open", guard.FailOpen, false, [3]algorithms.Decision{
				{Remaining: 9, ResetAfter: time.Hour}, {Remaining: 0, ResetAfter: time.Hour}, {Remaining: 9, ResetAfter: time.Hour}}},
			{"fail closed", guard.FailClosed, false, [3]algorithms.Decision{failClosed, failClosed, failClosed}},
			{"fail open, another node denies", guard.FailOpen, true, [3]algorithms.Decision{peek(10), denial, peek(10)}},
			{"fail closed, another node denies", guard.FailClosed, true, [3]algorithms.Decision{peek(10), denial, failClosed}},
		}
		for n, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				cfg := redis.Config{ClusterAddrs: cluster.Addrs(), SpreadKeys: true, KeyPrefix: fmt.Sprintf("slow%d:", n)}
				setup := newTestStore(t, cfg, clock.NewFake(t0)) // the default 10s timeout of the tests
				cfg.Timeout = 500 * time.Millisecond
				s := newGuardedStore(t, cfg, guard.Config{FailureMode: tt.mode}, clock.NewFake(t0))
				keys, nodes := onDistinctNodes(t, cluster, cfg.KeyPrefix, 3)
				req := func(cost int64) []store.Charge {
					return []store.Charge{
						{Domain: "shop", Key: keys[0], Limit: wide, Cost: cost},
						{Domain: "shop", Key: keys[1], Limit: narrow, Cost: cost},
						{Domain: "shop", Key: keys[2], Limit: wide, Cost: cost},
					}
				}
				apply(t, setup, req(0)...) // loads the script on every node
				apply(t, s, req(0)...)     // connects s to every node
				if tt.deny {
					apply(t, setup, req(1)[1])
				}
				slow := cluster.Nodes[nodes[2]]
				pause(t, slow)
				d := apply(t, s, req(1)...)
				for i := range d {
					if d[i] != tt.want[i] {
						t.Errorf("charge %d: %+v, want %+v", i, d[i], tt.want[i])
					}
				}
				if up, _ := s.Healthy(); up {
					t.Error("Healthy() true after a node timed out")
				}
				unpause(t, slow)
				after := apply(t, setup, req(0)...)
				if after[0].Remaining != 10 {
					t.Errorf("the first bucket has %d remaining, want 10: its charge undone", after[0].Remaining)
				}
				want := int64(1)
				if tt.deny {
					want = 0
				}
				if after[1].Remaining != want {
					t.Errorf("the second bucket has %d remaining, want %d", after[1].Remaining, want)
				}
				if r := after[2].Remaining; r != 9 && r != 10 { // its script may have run once paused Redis went on
					t.Errorf("the slow node's bucket has %d remaining, want 10, or 9 if its script ran late", r)
				}
			})
		}
	})

	t.Run("spread keys on Redis TIME: an undo restores the state and its expiry, or deletes the key", func(t *testing.T) {
		const prefix = "undo:"
		s := newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs(), SpreadKeys: true, KeyPrefix: prefix}, nil)
		admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs()})
		t.Cleanup(func() { admin.Close() })
		keys, _ := onDistinctNodes(t, cluster, prefix, 3)
		bucket := mustLimit(t, algorithms.TokenBucket, 3, time.Second, 0) // rest between milliseconds
		narrow := mustLimit(t, algorithms.FixedWindow, 1, time.Hour, 0)
		charge := func(i int, l *algorithms.Limit) store.Charge {
			return store.Charge{Domain: "shop", Key: keys[i], Limit: l, Cost: 1}
		}
		if d := apply(t, s, charge(0, bucket), charge(1, narrow)); d[0].Code != algorithms.Allowed || d[1].Code != algorithms.Allowed {
			t.Fatalf("first request: %+v, want admitted", d)
		}
		held := get(t, admin, prefix+string(keys[0]))
		_, heldExpiry := storedRest(t, admin, prefix+string(keys[0]))

		// keys[1] denies: keys[0]'s second charge and keys[2]'s first are undone.
		if d := apply(t, s, charge(0, bucket), charge(1, narrow), charge(2, bucket)); d[1].Code != algorithms.Denied {
			t.Fatalf("second request: %+v, want denied by its second charge", d)
		}
		if got := get(t, admin, prefix+string(keys[0])); got != held {
			t.Errorf("after the undo the bucket holds %q, want %q as before the request", got, held)
		}
		restAt, expiry := storedRest(t, admin, prefix+string(keys[0]))
		if expiry != heldExpiry || expiry*1e6 < restAt || expiry*1e6 >= restAt+1e6 {
			t.Errorf("after the undo the key expires at %d ms, want %d ms as before: its rest (%d ns) rounded up to the millisecond", expiry, heldExpiry, restAt)
		}
		if n, err := admin.Exists(context.Background(), prefix+string(keys[2])).Result(); err != nil || n != 0 {
			t.Errorf("the bucket charged only by the undone request still has a key (EXISTS %d, %v)", n, err)
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

	t.Run("the recommended ACL, spread keys", func(t *testing.T) {
		for _, n := range cluster.Nodes {
			setUser(t, n, redistest.RecommendedACL(t)...)
		}
		s := newTestStore(t, redis.Config{ClusterAddrs: cluster.Addrs(), SpreadKeys: true,
			Username: "ratelimitd", Password: "secret", KeyPrefix: redis.DefaultKeyPrefix}, nil)
		if err := s.Check(context.Background()); err != nil {
			t.Fatalf("Check as the recommended ACL user: %v", err)
		}
		everyOperation(t, s, "ratelimitd")
	})
}

// onDistinctNodes returns n bucket keys of the domain "shop" whose Redis
// keys, under prefix and without hash tag (spread keys), are held by n
// different nodes, and those nodes.
func onDistinctNodes(t *testing.T, c *redistest.Cluster, prefix string, n int) (keys [][]byte, nodes []int) {
	t.Helper()
	for i := 0; len(keys) < n; i++ {
		if i == 1000 {
			t.Fatalf("no %d keys on distinct nodes among 1000", n)
		}
		k := engineKey("shop", "k", fmt.Sprint(i))
		if node := c.Owner(t, prefix+string(k)); !slices.Contains(nodes, node) {
			keys, nodes = append(keys, k), append(nodes, node)
		}
	}
	return keys, nodes
}
