// Package redis is the store that keeps bucket states in Redis, so that
// several daemons behind a load balancer share one set of limits.
//
// # Same answers
//
// Apply decides exactly as the memory store does: store.Settle's rule over
// algorithms.Limit.Decide, all or nothing. The decision runs inside Redis,
// in one Lua script per request (EVALSHA, and EVAL when Redis answers
// NOSCRIPT, as after a restart): it reads every bucket of the request,
// decides all the charges, and writes the charged states only if no
// non-shadow charge is denied or over capacity; otherwise it writes nothing
// and reports the admissible charges as peeks. A request therefore costs
// one round trip to Redis, whatever its number of descriptors.
//
// Redis runs Lua 5.1, whose numbers are doubles, exact as integers only
// below 2^53, while the decisions use nanoseconds since the epoch (about
// 2^61), rates that are exact rationals and products of 128 bits. The
// script therefore does its arithmetic on exact integers of 24-bit limbs
// (bignum.lua), and decide.lua is internal/algorithms' gcra.go and
// window.go line for line on them. The tests hold the two to identical
// decisions: the algorithms' edge cases (the longest period at the latest
// time, 10^9 per second, 1 per day, MaxRequests per nanosecond, 7 per 3s,
// costs at capacity, clocks going back) and random timelines, decided by
// both stores and by store.Settle directly.
//
// # One clock
//
// The script reads Redis TIME: now is its microseconds times 1000, so every
// daemon sharing a Redis decides on the Redis server's clock, whatever its
// own. (The Redis clock is the server's wall clock: if it steps back, the
// algorithms' rule for a clock going back applies, never granting extra.)
//
// # Storage
//
// A bucket is one Redis string under KeyPrefix, "{domain}" (the hash tag,
// unless Config.SpreadKeys) and the engine's bucket key; its value is the
// state "t n m restAt" in hexadecimal. A charge sets the key to expire
// (PX, rounded up to whole milliseconds) when the bucket is back at rest,
// when it is indistinguishable from a key that is absent: nothing is kept
// for idle buckets, and Redis's own eviction needs no help.
//
// # Redis Cluster
//
// With the hash tag (the default), every bucket of one domain, and so every
// bucket of one request, is in one hash slot: the request is one script on
// one node, atomic and all or nothing exactly as on a single Redis. The
// price is that one domain's buckets all live on one node.
//
// With Config.SpreadKeys the buckets spread over the cluster, and a request
// whose buckets are in several slots is settled per slot, one script per
// slot, the scripts sent to their nodes at once (one round trip per node).
// Then, exactly:
//
//   - each slot's share of the request is atomic and all or nothing: its
//     charges are written together or not at all;
//   - the request is admitted only if every share admitted; each bucket
//     is decided atomically on its node, so no bucket ever admits more
//     than its limit;
//   - when a share is denied, the shares that were charged are undone in a
//     second round trip: a bucket is restored to its state before the
//     request if no other charge has reached it since, and otherwise its
//     charge stays — the denied request then consumed quota on that bucket,
//     which errs toward denying, never toward admitting;
//   - between the charge and the undo, other requests see the charge (and
//     may be denied by it);
//   - the statuses are Settle's, each share's decided at its own node's
//     Redis TIME.
//
// # Faults
//
// Every Apply has a deadline (Config.Timeout). When Redis fails or is too
// slow, Apply returns no error: it decides by Config.FailureMode (FailOpen:
// as if every bucket were at rest; FailClosed: every charge denied), marks
// the store down (Healthy, the ratelimitd_redis_up metric, the OnHealth
// hook) and counts the fallback decisions. A request whose deadline passed
// may still have been charged in Redis. The client reconnects by itself;
// the first success (a request, or Run's ping) marks the store up again.
// Apply returns an error only when the caller's own context ends first.
//
// # Local deny cache
//
// With Config.DenyCache above 0, a daemon remembers, per bucket, a denial
// of a non-shadow charge until its RetryAfter has passed. A request that
// charges such a bucket at least the denied cost in that time is denied
// without asking Redis: the denial would stand, as charges only ever take
// from a bucket. The cached bucket reports its denial with the wait left;
// the request's other charges are not read from Redis and are reported as
// a bucket at rest would report them, uncharged. That keeps an attack
// over its limit off Redis.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// FailureMode is what Apply decides when Redis cannot answer in time.
type FailureMode uint8

const (
	// FailOpen decides every charge as if its bucket were at rest: the
	// request is admitted unless a cost exceeds a capacity, and nothing is
	// charged anywhere.
	FailOpen FailureMode = iota
	// FailClosed denies every charge of cost above 0, with RetryAfter
	// FailClosedRetryAfter (a cost over capacity is still OverCapacity);
	// peeks report 0 remaining.
	FailClosed
)

// FailClosedRetryAfter is the RetryAfter of a charge denied by FailClosed.
const FailClosedRetryAfter = time.Second

// String returns "open" or "closed".
func (m FailureMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// Set parses "open" or "closed" (a flag.Value).
func (m *FailureMode) Set(s string) error {
	switch s {
	case "open":
		*m = FailOpen
	case "closed":
		*m = FailClosed
	default:
		return fmt.Errorf("failure mode %q: want open or closed", s)
	}
	return nil
}

// Defaults of Config.
const (
	DefaultTimeout   = 250 * time.Millisecond
	DefaultKeyPrefix = "ratelimitd:"
)

// Config says where Redis is and how to use it.
type Config struct {
	// Addr is a standalone Redis's host:port.
	Addr string
	// ClusterAddrs are seed addresses of a Redis Cluster; when set, Addr
	// must be empty.
	ClusterAddrs []string
	// Username and Password authenticate (AUTH); both optional.
	Username, Password string
	// TLS, when not nil, connects over TLS with this configuration.
	TLS *tls.Config
	// Timeout bounds each Apply's exchange with Redis (0: DefaultTimeout).
	Timeout time.Duration
	// FailureMode decides requests while Redis fails (default FailOpen).
	FailureMode FailureMode
	// KeyPrefix starts every key (empty: DefaultKeyPrefix).
	KeyPrefix string
	// SpreadKeys leaves out the {domain} hash tag, so that a domain's
	// buckets spread over a cluster's nodes; requests whose buckets are in
	// several slots are then settled per slot (see the package doc).
	SpreadKeys bool
	// DenyCache is how many buckets the local deny cache remembers (0:
	// no cache).
	DenyCache int
	// OnHealth, if not nil, is called (on its own goroutine, in order)
	// each time the store goes down or comes back up; err is the failure,
	// or nil when up.
	OnHealth func(up bool, err error)
	// Logger receives the store's state changes (nil: slog.Default()).
	Logger *slog.Logger
}

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	client  goredis.UniversalClient
	cluster *goredis.ClusterClient // nil for a standalone Redis
	prefix  string
	spread  bool
	timeout time.Duration
	mode    FailureMode
	log     *slog.Logger
	local   clock.Clock // the deny cache's clock
	cache   *denyCache  // nil without

	// testNow, set only by tests, is passed to the script as now instead
	// of Redis TIME, and keys are then written without expiry.
	testNow clock.Clock

	health   chan healthChange
	up       atomic.Bool
	lastErr  atomic.Pointer[string]
	onHealth func(bool, error)
	done     chan struct{}
	closing  sync.Once

	stats stats
}

type healthChange struct {
	up  bool
	err error
}

// stats are the store's counters, read by its metrics.
type stats struct {
	applies    atomic.Uint64 // Apply calls that asked Redis
	roundTrips atomic.Uint64 // commands and pipelines sent to a node
	errors     atomic.Uint64 // Apply calls that Redis failed
	fallbacks  atomic.Uint64 // requests decided by the failure mode
	cacheHits  atomic.Uint64 // requests denied from the deny cache
	undos      atomic.Uint64 // shares undone after another slot denied
}

// New connects to Redis as cfg says. It does not wait for Redis: a store
// whose Redis is down starts down and decides by its failure mode until
// Redis answers.
func New(cfg Config) (*Store, error) {
	if (cfg.Addr == "") == (len(cfg.ClusterAddrs) == 0) {
		return nil, errors.New("redis: set exactly one of an address and cluster addresses")
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("redis: timeout must not be negative")
	}
	if cfg.FailureMode != FailOpen && cfg.FailureMode != FailClosed {
		return nil, fmt.Errorf("redis: unknown failure mode %d", cfg.FailureMode)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{
		prefix:   cfg.KeyPrefix,
		spread:   cfg.SpreadKeys,
		timeout:  cfg.Timeout,
		mode:     cfg.FailureMode,
		log:      cfg.Logger,
		local:    clock.NewMonotonic(),
		onHealth: cfg.OnHealth,
		health:   make(chan healthChange, 16),
		done:     make(chan struct{}),
	}
	if cfg.DenyCache > 0 {
		s.cache = newDenyCache(cfg.DenyCache)
	}
	s.up.Store(true)
	hook := roundTripHook{&s.stats.roundTrips}
	// No retries: a script that reached Redis before the connection broke
	// may have charged, and running it again would charge twice.
	if cfg.Addr != "" {
		c := goredis.NewClient(&goredis.Options{
			Addr:                  cfg.Addr,
			Username:              cfg.Username,
			Password:              cfg.Password,
			TLSConfig:             cfg.TLS,
			MaxRetries:            -1,
			ContextTimeoutEnabled: true,
			DisableIdentity:       true,
		})
		c.AddHook(hook)
		s.client = c
	} else {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs:                 cfg.ClusterAddrs,
			Username:              cfg.Username,
			Password:              cfg.Password,
			TLSConfig:             cfg.TLS,
			MaxRetries:            -1,
			ContextTimeoutEnabled: true,
			DisableIdentity:       true,
		})
		c.OnNewNode(func(n *goredis.Client) { n.AddHook(hook) })
		s.client, s.cluster = c, c
	}
	go s.reportHealth()
	return s, nil
}

// Close closes the connections to Redis.
func (s *Store) Close() error {
	s.closing.Do(func() { close(s.done) })
	return s.client.Close()
}

// Apply implements store.Store, as the package doc describes.
func (s *Store) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	if len(charges) == 0 {
		return nil
	}
	if s.cache != nil && s.cache.deny(charges, decisions, s.localNow()) {
		s.stats.cacheHits.Add(1)
		return nil
	}
	s.stats.applies.Add(1)
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	err := s.settle(rctx, charges, decisions)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.stats.errors.Add(1)
		s.stats.fallbacks.Add(1)
		s.setHealth(false, err)
		s.fallback(charges, decisions)
		return nil
	}
	s.setHealth(true, nil)
	if s.cache != nil {
		s.cache.remember(charges, decisions, s.localNow())
	}
	return nil
}

func (s *Store) localNow() int64 {
	if s.testNow != nil {
		return s.testNow.Now()
	}
	return s.local.Now()
}

// settle runs the script: once for the whole request, or per slot.
func (s *Store) settle(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	now, expire := "", true
	if s.testNow != nil {
		now, expire = hexNow(s.testNow.Now()), false
	}
	keys := make([]string, len(charges))
	var buf []byte
	for i := range charges {
		buf = redisKey(buf[:0], s.prefix, charges[i].Domain, charges[i].Key, s.spread)
		keys[i] = string(buf)
	}
	all := make([]int, len(charges))
	for i := range all {
		all[i] = i
	}
	if s.cluster == nil || len(charges) == 1 {
		return s.settleOne(ctx, keys, all, now, expire, charges, decisions)
	}
	groups := groupBySlot(keys, all)
	if len(groups) == 1 {
		return s.settleOne(ctx, keys, all, now, expire, charges, decisions)
	}
	return s.settleSlots(ctx, keys, groups, now, expire, charges, decisions)
}

// settleOne settles the charges idx, all in one slot, in one script.
func (s *Store) settleOne(ctx context.Context, keys []string, idx []int, now string, expire bool, charges []store.Charge, decisions []algorithms.Decision) error {
	v, err := settleScript.Run(ctx, s.client, keys, settleArgs(now, expire, false, charges, idx)...).Result()
	if err != nil {
		return err
	}
	r, err := parseSettleReply(v)
	if err != nil {
		return err
	}
	return parseDecisions(r.decisions, idx, decisions)
}

// groupBySlot returns idx grouped by the hash slots of their keys, in
// order of first appearance.
func groupBySlot(keys []string, idx []int) [][]int {
	var slots []int
	var groups [][]int
	for _, i := range idx {
		slot := slotOf([]byte(keys[i]))
		g := slices.Index(slots, slot)
		if g < 0 {
			slots = append(slots, slot)
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// settleSlots settles a request whose keys are in several slots: one
// try-mode script per slot, pipelined (the cluster client sends each
// node's at once), then the undo of the charged shares if any share was
// denied.
func (s *Store) settleSlots(ctx context.Context, keys []string, groups [][]int, now string, expire bool, charges []store.Charge, decisions []algorithms.Decision) error {
	groupKeys := make([][]string, len(groups))
	for g, idx := range groups {
		for _, i := range idx {
			groupKeys[g] = append(groupKeys[g], keys[i])
		}
	}
	run := func(eval bool, which []int) ([]*goredis.Cmd, error) {
		pipe := s.client.Pipeline()
		cmds := make([]*goredis.Cmd, len(groups))
		for _, g := range which {
			args := settleArgs(now, expire, true, charges, groups[g])
			if eval {
				cmds[g] = settleScript.Eval(ctx, pipe, groupKeys[g], args...)
			} else {
				cmds[g] = settleScript.EvalSha(ctx, pipe, groupKeys[g], args...)
			}
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	every := make([]int, len(groups))
	for g := range every {
		every[g] = g
	}
	cmds, _ := run(false, every)
	var noScript []int
	for g, c := range cmds {
		if goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			noScript = append(noScript, g)
		}
	}
	if len(noScript) > 0 {
		again, _ := run(true, noScript)
		for _, g := range noScript {
			cmds[g] = again[g]
		}
	}

	replies := make([]settleReply, len(groups))
	var failed error
	denied := false
	for g, c := range cmds {
		v, err := c.Result()
		if err == nil {
			replies[g], err = parseSettleReply(v)
		}
		if err != nil {
			failed = err
			continue
		}
		if !replies[g].committed {
			denied = true
		}
	}
	if failed != nil || denied {
		// Undo the shares that were charged, and report them as peeks.
		if err := s.undo(ctx, groups, groupKeys, replies, now, expire); err != nil && failed == nil {
			s.log.Warn("redis: undoing the charges of a request denied on another slot failed; they stand", "err", err)
		}
		if failed != nil {
			return failed
		}
		for g, idx := range groups {
			r := replies[g].decisions
			if replies[g].committed {
				r = replies[g].peeks
			}
			if err := parseDecisions(r, idx, decisions); err != nil {
				return err
			}
		}
		return nil
	}
	for g, idx := range groups {
		if err := parseDecisions(replies[g].decisions, idx, decisions); err != nil {
			return err
		}
	}
	return nil
}

// undo runs undo.lua on every share that was charged.
func (s *Store) undo(ctx context.Context, groups [][]int, groupKeys [][]string, replies []settleReply, now string, expire bool) error {
	pipe := s.client.Pipeline()
	n := 0
	for g := range groups {
		r := &replies[g]
		if !r.committed || len(r.writes) == 0 {
			continue
		}
		var keys []string
		args := []any{now, flag(expire)}
		for _, w := range r.writes {
			keys = append(keys, groupKeys[g][w.index])
			args = append(args, w.new, w.old)
		}
		undoScript.Eval(ctx, pipe, keys, args...)
		n++
	}
	if n == 0 {
		return nil
	}
	s.stats.undos.Add(uint64(n))
	_, err := pipe.Exec(ctx)
	return err
}

// fallback decides charges by the failure mode.
func (s *Store) fallback(charges []store.Charge, decisions []algorithms.Decision) {
	if s.mode == FailOpen {
		states := make([]algorithms.State, len(charges))
		store.Settle(charges, states, s.localNow(), decisions)
		return
	}
	for i := range charges {
		c := &charges[i]
		switch {
		case c.Cost <= 0:
			decisions[i] = algorithms.Decision{}
		case c.Cost > c.Limit.Capacity():
			decisions[i] = algorithms.Decision{Code: algorithms.OverCapacity}
		default:
			decisions[i] = algorithms.Decision{Code: algorithms.Denied, RetryAfter: FailClosedRetryAfter}
		}
	}
}

// Healthy reports whether the last exchange with Redis succeeded, and if
// not, how it failed.
func (s *Store) Healthy() (bool, string) {
	if s.up.Load() {
		return true, ""
	}
	if e := s.lastErr.Load(); e != nil {
		return false, *e
	}
	return false, "unreachable"
}

func (s *Store) setHealth(up bool, err error) {
	if !up {
		msg := err.Error()
		s.lastErr.Store(&msg)
	}
	if s.up.Swap(up) == up {
		return
	}
	select {
	case s.health <- healthChange{up, err}:
	default: // a burst of flapping; the next change reports the state
	}
}

// reportHealth logs health changes and tells OnHealth, in order.
func (s *Store) reportHealth() {
	for {
		select {
		case <-s.done:
			return
		case h := <-s.health:
			if h.up {
				s.log.Info("redis is reachable again; deciding from Redis")
			} else {
				s.log.Warn("redis failed; deciding by the failure mode", "failure_mode", s.mode.String(), "err", h.err)
			}
			if s.onHealth != nil {
				s.onHealth(h.up, h.err)
			}
		}
	}
}

// Ping asks Redis (every node of a cluster) for PONG within the store's
// timeout, and marks the store up or down by the answer.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachShard(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = s.client.Ping(ctx).Err()
	}
	s.setHealth(err == nil, err)
	return err
}

// Run pings Redis every interval until ctx is done, so that health follows
// Redis even without traffic, and drops expired deny-cache entries.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Ping(ctx)
			if s.cache != nil {
				s.cache.sweep(s.localNow())
			}
		}
	}
}

// roundTripHook counts the round trips of requests to Redis nodes: each
// command and each pipeline that carries a script. The client's own
// exchanges (connection handshakes, cluster topology) and Ping are not
// requests' and are not counted.
type roundTripHook struct{ n *atomic.Uint64 }

func isScript(cmd goredis.Cmder) bool {
	switch cmd.Name() {
	case "evalsha", "eval":
		return true
	}
	return false
}

func (h roundTripHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h roundTripHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if isScript(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h roundTripHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) > 0 && isScript(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// RoundTrips returns how many round trips to Redis nodes the store's
// requests have made (see roundTripHook).
func (s *Store) RoundTrips() uint64 { return s.stats.roundTrips.Load() }

// Applies returns how many Apply calls asked Redis (those answered from the
// deny cache do not).
func (s *Store) Applies() uint64 { return s.stats.applies.Load() }
