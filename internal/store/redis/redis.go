// Package redis is the store that keeps bucket states in Redis, so that
// several daemons behind a load balancer share one set of limits.
//
// # Same answers
//
// Apply decides exactly as the memory store does: store.Settle's rule over
// algorithms.Limit's decisions. The decision runs inside Redis, in a Lua
// script (EVALSHA, and EVAL when Redis answers NOSCRIPT, as after a
// restart): it reads every bucket of the request, decides all the
// charges, and writes the admits' states only if no non-shadow charge is
// denied or over capacity (otherwise it reports the admissible ones as
// peeks); it writes overdraft charges and refunds whatever the request
// decides, and checks never.
//
// Requests share round trips (batch.go): a request is sent at once when
// no batch is in flight, and requests that arrive while one is are sent
// together in the next, one script call per hash slot settling them one
// after the other, each atomic and all or nothing on its own, and one
// write per node. A request therefore costs at most one round trip to
// Redis, whatever its number of descriptors, and under load a fraction of
// one.
//
// Redis runs Lua 5.1, whose numbers are doubles, exact as integers only
// below 2^53, while the decisions use nanoseconds since the epoch (about
// 2^61), rates that are exact rationals and products of 128 bits. The
// script therefore decides each charge on one of two paths, with the same
// answer: fast.lua, on plain numbers with every time taken relative to
// now, for the limits and states whose values all fit below 2^53 (every
// ordinary limit: periods below 6.5 days, Capacity·Period below 2^52 for
// the sliding window and the buckets); and decide.lua, on exact integers
// of 24-bit limbs (bignum.lua), for the rest. Both are internal/algorithms'
// gcra.go and window.go line for line. The tests hold them to identical
// decisions: the algorithms' edge cases (the longest period at the latest
// time, 10^9 per second, 1 per day, MaxRequests per nanosecond, 7 per 3s,
// costs at capacity, clocks going back) and random timelines, decided by
// both stores and by store.Settle directly, and they check which path each
// case took.
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
// state t, n, m and restAt in 41 bytes (now.lua's STATE, docs/redis.md).
// A charge sets the key to expire at
// restAt, when the bucket is back at rest and indistinguishable from a key
// that is absent (PXAT, restAt rounded up to the millisecond, so never
// sooner): nothing is kept for idle buckets, and Redis's own eviction needs
// no help. A charge that leaves that expiry where it was overwrites the
// value in place (SETRANGE), and a fixed window's charge in the window it
// was last charged in rewrites the count alone: the same value and expiry
// for less of Redis's time.
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
//     Redis TIME;
//   - when a node fails (or answers after the timeout), the shares that
//     were charged are undone likewise (best effort, within a timeout of
//     the undo's own), and the request is decided by Config.FailureMode —
//     unless another share denied it: the request is then denied, and only
//     the failed node's charges are decided by the failure mode, as the
//     charges of a denied request.
//
// # Faults
//
// Every Apply has a deadline (Config.Timeout) for its exchange with Redis.
// The client never sends a script twice: not after an error (a script that
// reached Redis before the connection broke may have charged), and, in a
// cluster, not on a MOVED or ASK redirection either: such a request is
// decided by the failure mode (and a MOVED makes the client reload its slot
// map for the requests that follow).
//
// When Redis fails or is too slow, Apply returns no error: it decides by
// Config.FailureMode (FailOpen: as if every bucket were at rest;
// FailClosed: every charge denied), marks the store down (Healthy, the
// ratelimitd_redis_up metric, the OnHealth hook) and counts the fallback
// decision. A request whose deadline passed may still have been charged in
// Redis. A store starts up, nothing having failed yet; the client
// reconnects by itself, and the first success (a request, or a ping of
// Run's, the first as Run starts) marks the store up again. Apply returns
// an error only when the caller's own context ends first (or the store is
// closed while the request waits).
//
// # Circuit breaker
//
// When Config.BreakerFailures exchanges with Redis fail in a row (requests
// or Run's pings; a timeout is a failure), the breaker opens: for
// Config.BreakerCooloff, on Config.Clock, every request is decided by the
// failure mode at once, without asking Redis — so that a hung Redis costs
// callers nothing rather than Config.Timeout each. Then the breaker is half
// open: the next request probes Redis, alone (the others still decided by
// the failure mode); its failure opens the breaker for another cool-off,
// its success closes it. Run's pings count as failures when they fail; a
// PONG does not close the breaker (a Redis that holds scripts still
// answers PING), but once the cool-off has passed, Run probes as a request
// would, with the script, so that the store recovers without traffic.
// While the breaker is not closed, the store is down, and Healthy says so.
//
// # Local deny cache
//
// With Config.DenyCache above 0, a daemon remembers, per bucket, a denial
// of a non-shadow charge until its RetryAfter has passed, counted on
// Config.Clock from when the request was sent (the script ran no earlier,
// so the cache never denies longer than Redis would). A request that
// charges such a bucket the same cost in that time is denied without
// asking Redis: the denial would stand, as charges only ever take from a
// bucket (a refund through this store forgets the bucket's denial; one
// through another daemon is seen once the wait has passed; a request with
// an overdraft charge or a refund always reaches Redis; a check is a cost
// of 1). The cached bucket reports its denial with the wait left; the
// request's other charges are not read from Redis and are reported as
// store.Settle reports a denied request's on buckets at rest, uncharged.
// That keeps an attack over its limit off Redis.
package redis

import (
	"cmp"
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
	"github.com/ratelimitd/ratelimitd/internal/reminder"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// FailureMode is what Apply decides when Redis cannot answer in time.
type FailureMode uint8

const (
	// FailOpen decides every charge as if its bucket were at rest: the
	// request is admitted unless a cost exceeds a capacity, and nothing is
	// charged anywhere (an overdraft charge or a refund is not recorded).
	FailOpen FailureMode = iota
	// FailClosed denies every charge of cost above 0 and every check, with
	// RetryAfter FailClosedRetryAfter (an admit over capacity is still
	// OverCapacity); peeks and refunds are allowed and report 0 remaining.
	// Nothing is recorded.
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
	// BreakerFailures is how many exchanges with Redis in a row must fail
	// (time out or err) to open the circuit breaker (0:
	// DefaultBreakerFailures); BreakerCooloff how long it then stays open
	// before a request probes Redis again (0: DefaultBreakerCooloff). See
	// the package doc.
	BreakerFailures int
	BreakerCooloff  time.Duration
	// DenyCache is how many buckets the local deny cache remembers (0:
	// no cache).
	DenyCache int
	// OnHealth, if not nil, is told when the store's health changes: up
	// false with the failure when it goes down, up true and err nil when
	// it is back. The calls are made one at a time on a goroutine of the
	// store's, and alternate, the first saying down (a store starts up).
	// Changes that come faster than OnHealth returns are coalesced: a
	// short flap may go unreported, but once the health settles, the last
	// call says it (as Healthy does).
	OnHealth func(up bool, err error)
	// Logger receives the store's state changes (nil: slog.Default()).
	Logger *slog.Logger
	// Clock is the daemon's own clock (nil: clock.NewMonotonic()): how
	// long the deny cache remembers a denial, and the time at which
	// FailOpen decides. Decisions from Redis never read it: they are made
	// at Redis TIME.
	Clock clock.Clock
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
	local   clock.Clock // the deny cache's and FailOpen's clock
	cache   *denyCache  // nil without

	// testNow, set only by tests, is passed to the script as now instead
	// of Redis TIME, and keys are then written without expiry.
	testNow clock.Clock

	queue   chan *call         // requests waiting for a sender (batch.go)
	specs   chargeSpecs        // the charges' strings for settle.lua
	batches atomic.Uint64      // batches sent so far
	life    context.Context    // ends when the store closes: cuts short what is in flight
	end     context.CancelFunc // ends life

	health   chan struct{} // one slot: the health changed since reportHealth looked
	up       atomic.Bool
	lastErr  atomic.Pointer[error] // the last failure
	lastDial atomic.Pointer[error] // the last failure to connect, nil once a connection succeeded (dialHook)
	onHealth func(bool, error)
	done     chan struct{}
	closing  sync.Once

	stats   stats
	metrics histograms
	breaker *breaker
}

// stats are the store's counters, read by its metrics.
type stats struct {
	applies    atomic.Uint64 // Apply calls that asked Redis
	roundTrips atomic.Uint64 // commands and pipelines sent to a node
	fallbacks  atomic.Uint64 // requests decided, wholly or in part, by the failure mode
	cacheHits  atomic.Uint64 // requests denied from the deny cache
	undos      atomic.Uint64 // shares undone after another slot denied or failed
	open       atomic.Uint64 // requests decided by the failure mode because the breaker was open
	fast       atomic.Uint64 // charges the script decided on plain numbers (fast.lua)
	bignum     atomic.Uint64 // charges the script decided on bignums
}

// New connects to Redis as cfg says. It does not wait for Redis: the store
// starts up (Healthy), as nothing has failed yet, and the first request or
// ping that Redis fails marks it down (Run pings as soon as it starts).
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
	if cfg.BreakerFailures < 0 || cfg.BreakerCooloff < 0 {
		return nil, errors.New("redis: breaker failures and cool-off must not be negative")
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerCooloff == 0 {
		cfg.BreakerCooloff = DefaultBreakerCooloff
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.NewMonotonic()
	}
	s := &Store{
		prefix:   cfg.KeyPrefix,
		spread:   cfg.SpreadKeys,
		timeout:  cfg.Timeout,
		mode:     cfg.FailureMode,
		log:      cfg.Logger,
		local:    cfg.Clock,
		onHealth: cfg.OnHealth,
		health:   make(chan struct{}, 1),
		done:     make(chan struct{}),
		queue:    make(chan *call, 4*maxBatch),
	}
	s.life, s.end = context.WithCancel(context.Background())
	// The breaker opens again after every failed probe, once per cool-off:
	// a warning as it opens, then a reminder a minute while it stays open.
	open := reminder.New(cfg.Clock, reminder.DefaultInterval)
	s.breaker = newBreaker(cfg.BreakerFailures, cfg.BreakerCooloff, func(from, to BreakerState) {
		switch to {
		case BreakerOpen:
			log, since, repeats := open.Start()
			switch {
			case !log:
			case from == BreakerClosed:
				s.log.Warn("redis circuit breaker open: deciding by the failure mode without asking Redis",
					"failure_mode", s.mode.String(), "cooloff", cfg.BreakerCooloff, "failures_in_a_row", cfg.BreakerFailures)
			default:
				s.log.Warn("redis circuit breaker still open: deciding by the failure mode without asking Redis",
					"failure_mode", s.mode.String(), "open_for", since.Round(time.Second), "probes_failed", repeats)
			}
		case BreakerHalfOpen:
			s.log.Debug("redis circuit breaker half open: probing Redis")
		case BreakerClosed:
			_, since := open.Stop()
			s.log.Info("redis circuit breaker closed: deciding from Redis", "was", from.String(), "open_for", since.Round(time.Millisecond))
		}
	})
	s.metrics = newHistograms()
	if cfg.DenyCache > 0 {
		s.cache = newDenyCache(cfg.DenyCache)
	}
	s.up.Store(true)
	SetClientLogger(cfg.Logger)
	hook := roundTripHook{&s.stats.roundTrips}
	dial := dialHook{&s.lastDial}
	// No retries: a script that reached Redis before the connection broke
	// may have charged, and running it again would charge twice. MaxRetries
	// -1 turns off the retries after errors. The cluster client also
	// retries — after errors as on MOVED and ASK, commands and pipelines
	// alike — up to MaxRedirects: -1 turns that off too, so that a
	// redirected request is decided by the failure mode while the client
	// reloads its slot map (which a MOVED starts).
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
		c.AddHook(dial)
		s.client = c
	} else {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs:                 cfg.ClusterAddrs,
			Username:              cfg.Username,
			Password:              cfg.Password,
			TLSConfig:             cfg.TLS,
			MaxRetries:            -1,
			MaxRedirects:          -1,
			ContextTimeoutEnabled: true,
			DisableIdentity:       true,
		})
		c.OnNewNode(func(n *goredis.Client) {
			n.AddHook(hook)
			n.AddHook(dial)
		})
		s.client, s.cluster = c, c
	}
	go s.reportHealth()
	for range senders {
		go s.sender()
	}
	return s, nil
}

// Close cuts short every exchange with Redis in flight (their requests
// are decided by the failure mode, or end with their caller's context)
// and closes the connections to Redis.
func (s *Store) Close() error {
	s.closing.Do(func() {
		close(s.done)
		s.end()
	})
	return s.client.Close()
}

// Apply implements store.Store, as the package doc describes.
func (s *Store) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	if len(charges) == 0 {
		return nil
	}
	// The local time before the request is sent: the deny cache counts a
	// denial's RetryAfter from it, as the script ran no earlier.
	sent := s.localNow()
	if s.cache != nil && s.cache.deny(charges, decisions, sent) {
		s.stats.cacheHits.Add(1)
		return nil
	}
	ok, probe := s.breaker.allow(s.local.Now())
	if !ok {
		// The breaker is open: decide by the failure mode at once.
		s.stats.open.Add(1)
		s.stats.fallbacks.Add(1)
		s.fallback(charges, indexes(len(charges)), false, sent, decisions)
		return nil
	}
	s.stats.applies.Add(1)
	err := s.settle(ctx, sent, charges, decisions)
	if err != nil && ctx.Err() != nil {
		s.breaker.release(probe)
		return ctx.Err()
	}
	var exchange uint64 // the batch that failed, if one did
	if err != nil {
		if be := (*batchError)(nil); errors.As(err, &be) {
			exchange = be.batch
		}
	}
	err = s.explain(err)
	s.breaker.done(probe, err, exchange, s.local.Now())
	if err != nil {
		s.stats.fallbacks.Add(1)
		s.setHealth(err)
		var denied *deniedElsewhere
		if !errors.As(err, &denied) {
			s.fallback(charges, indexes(len(charges)), false, sent, decisions)
		}
		return nil
	}
	s.setHealth(nil)
	if s.cache != nil {
		s.cache.remember(charges, decisions, sent)
	}
	return nil
}

func (s *Store) localNow() int64 {
	if s.testNow != nil {
		return s.testNow.Now()
	}
	return s.local.Now()
}

// indexes returns 0, 1, ..., n-1, to be read only: for the common counts,
// a part of one shared slice.
func indexes(n int) []int {
	if n <= len(sharedIndexes) {
		return sharedIndexes[:n:n]
	}
	return makeIndexes(n)
}

var sharedIndexes = makeIndexes(64)

func makeIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// deniedElsewhere is settle's error when a node failed while another
// slot's share denied the request: the decisions are made (the failed
// slots' by the failure mode), and the request is denied.
type deniedElsewhere struct{ err error }

func (e *deniedElsewhere) Error() string { return e.err.Error() }
func (e *deniedElsewhere) Unwrap() error { return e.err }

// settle runs the script: once for the whole request, or per slot, within
// the store's timeout. sent is the local time, which a test clock passes
// to the script as now.
func (s *Store) settle(ctx context.Context, sent int64, charges []store.Charge, decisions []algorithms.Decision) error {
	now, expire := redisTime, true
	if s.testNow != nil {
		now, expire = nowArgs(sent), false
	}
	// The keys, built into one string that each key is a part of: one
	// allocation for them all.
	size := 0
	for i := range charges {
		size += redisKeyLen(s.prefix, charges[i].Domain, charges[i].Key, s.spread)
	}
	buf := make([]byte, 0, size)
	for i := range charges {
		buf = redisKey(buf, s.prefix, charges[i].Domain, charges[i].Key, s.spread)
	}
	joined := string(buf)
	keys := make([]string, len(charges))
	for i := range charges {
		n := redisKeyLen(s.prefix, charges[i].Domain, charges[i].Key, s.spread)
		keys[i], joined = joined[:n], joined[n:]
	}
	all := indexes(len(charges))
	if s.cluster == nil || len(charges) == 1 {
		return s.settleOne(ctx, keys, all, now, charges, decisions)
	}
	groups := groupBySlot(keys, all)
	if len(groups) == 1 {
		return s.settleOne(ctx, keys, all, now, charges, decisions)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.settleSlots(ctx, keys, groups, now, expire, sent, charges, decisions)
}

// settleOne settles the charges idx, all in one slot, in one script call
// that a sender may share with other requests (batch.go), within the
// store's timeout.
func (s *Store) settleOne(ctx context.Context, keys []string, idx []int, now [2]string, charges []store.Charge, decisions []algorithms.Decision) error {
	c := &call{
		ctx:      ctx,
		deadline: time.Now().Add(s.timeout),
		keys:     keys,
		args:     appendRequest(make([]any, 0, 1+argsPerCharge*len(idx)), &s.specs, charges, idx),
		now:      now,
		done:     make(chan struct{}),
	}
	if s.cluster != nil {
		c.slot = slotOf([]byte(keys[0]))
	}
	if err := s.send(ctx, c); err != nil {
		return err
	}
	return s.decode(c.reply.decisions, idx, decisions)
}

// decode writes the decisions elems holds (settleReply.decisions) into
// decisions[idx[j]] and counts their paths.
func (s *Store) decode(elems []any, idx []int, decisions []algorithms.Decision) error {
	fast, err := decodeDecisions(elems, idx, decisions)
	if err != nil {
		return err
	}
	s.stats.fast.Add(uint64(fast))
	s.stats.bignum.Add(uint64(len(idx) - fast))
	return nil
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
// denied or failed.
func (s *Store) settleSlots(ctx context.Context, keys []string, groups [][]int, now [2]string, expire bool, sent int64, charges []store.Charge, decisions []algorithms.Decision) error {
	groupKeys := make([][]string, len(groups))
	for g, idx := range groups {
		for _, i := range idx {
			groupKeys[g] = append(groupKeys[g], keys[i])
		}
	}
	args := make([][]any, len(groups))
	for g, idx := range groups {
		args[g] = appendRequest(settleHead(now, expire, true, 1), &s.specs, charges, idx)
	}
	cmds := s.runScripts(ctx, groupKeys, args)

	replies := make([]settleReply, len(groups))
	failed := make([]bool, len(groups))
	var failure error
	denied := false
	for g, c := range cmds {
		r, err := shareReply(c, len(groups[g]))
		if err != nil {
			failed[g] = true
			failure = cmp.Or(failure, err)
			continue
		}
		replies[g] = r
		if !r.committed {
			denied = true
		}
	}
	if failure == nil && !denied {
		for g, idx := range groups {
			if err := s.decode(replies[g].decisions, idx, decisions); err != nil {
				return err
			}
		}
		return nil
	}

	// Undo the shares that were charged, on a deadline of the undo's own:
	// the request's may have passed (a node that timed out).
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	err := s.undo(uctx, groups, groupKeys, replies, now, expire)
	cancel()
	if err != nil {
		s.log.Warn("redis: undoing the charges of a request that was not admitted failed; they stand", "err", err)
	}
	if !denied {
		return failure // decided by the failure mode
	}
	// A share denied the request: it is denied whatever the failed shares
	// would have said. Report the charged shares as peeks (Settle's rule),
	// and decide only the failed shares by the failure mode.
	for g, idx := range groups {
		var err error
		switch {
		case failed[g]:
			s.fallback(charges, idx, true, sent, decisions)
		case replies[g].committed:
			err = s.decode(replies[g].peeks, idx, decisions)
		default:
			err = s.decode(replies[g].decisions, idx, decisions)
		}
		if err != nil {
			return err
		}
	}
	if failure != nil {
		return &deniedElsewhere{failure}
	}
	return nil
}

// shareReply returns the reply of one share's script. A reply that arrived
// stands even if the client marked its command failed afterwards (as a
// pipeline may when it gives up on another node): a share that charged is
// known to have charged, and is undone if need be.
func shareReply(c *goredis.Cmd, keys int) (settleReply, error) {
	v, err := c.Result()
	if v == nil {
		if err == nil {
			err = errors.New("settle script: empty reply")
		}
		return settleReply{}, err
	}
	return parseSettleReply(v, keys)
}

// undo runs undo.lua on every share that was charged.
func (s *Store) undo(ctx context.Context, groups [][]int, groupKeys [][]string, replies []settleReply, now [2]string, expire bool) error {
	pipe := s.client.Pipeline()
	n := 0
	for g := range groups {
		r := &replies[g]
		if !r.committed || len(r.writes) == 0 {
			continue
		}
		var keys []string
		args := []any{now[0], now[1], flag(expire)}
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

// fallback decides charges[i], i in idx, by the failure mode at the local
// time now: as a request of their own, or, when deniedElsewhere, as
// charges of a request that another slot's share denied.
func (s *Store) fallback(charges []store.Charge, idx []int, deniedElsewhere bool, now int64, decisions []algorithms.Decision) {
	if s.mode == FailOpen {
		atRest(charges, idx, deniedElsewhere, now, decisions)
		return
	}
	for _, i := range idx {
		c := &charges[i]
		switch {
		case c.Kind == store.Check:
			decisions[i] = algorithms.Decision{Code: algorithms.Denied, RetryAfter: FailClosedRetryAfter}
		case c.Cost <= 0 || c.Kind == store.Refund:
			decisions[i] = algorithms.Decision{}
		case c.Cost > c.Limit.Capacity() && c.Kind != store.Overdraft:
			decisions[i] = algorithms.Decision{Code: algorithms.OverCapacity}
		default:
			decisions[i] = algorithms.Decision{Code: algorithms.Denied, RetryAfter: FailClosedRetryAfter}
		}
	}
}

// atRest writes into decisions[i], i in idx, what store.Settle reports for
// those charges at now on buckets at rest: as a request of their own, or,
// when denied, as charges of a request that is denied anyway (Settle then
// reports the admissible ones as peeks).
func atRest(charges []store.Charge, idx []int, denied bool, now int64, decisions []algorithms.Decision) {
	if len(idx) == 0 {
		return
	}
	sub := make([]store.Charge, 0, len(idx)+1)
	for _, i := range idx {
		sub = append(sub, charges[i])
	}
	if denied {
		// A charge over its capacity denies the request, as the denial
		// elsewhere does.
		l := sub[0].Limit
		sub = append(sub, store.Charge{Limit: l, Cost: l.Capacity() + 1})
	}
	d := make([]algorithms.Decision, len(sub))
	store.Settle(sub, make([]algorithms.State, len(sub)), now, d)
	for j, i := range idx {
		decisions[i] = d[j]
	}
}

// Healthy reports whether the last exchange with Redis succeeded, and if
// not, how it failed (and the circuit breaker's state, when not closed).
func (s *Store) Healthy() (bool, string) {
	if s.up.Load() {
		return true, ""
	}
	why := "unreachable"
	if e := s.lastErr.Load(); e != nil {
		why = (*e).Error()
	}
	if st := s.breaker.State(); st != BreakerClosed {
		why = "circuit breaker " + st.String() + ": " + why
	}
	return false, why
}

// Breaker returns the circuit breaker's state.
func (s *Store) Breaker() BreakerState { return s.breaker.State() }

// setHealth records how an exchange with Redis went (err nil: it
// succeeded) and, if that changed the health, wakes reportHealth.
func (s *Store) setHealth(err error) {
	up := err == nil
	if !up {
		last := err // a copy of its own, so that a success allocates nothing
		s.lastErr.Store(&last)
	}
	if s.up.Swap(up) == up {
		return
	}
	select {
	case s.health <- struct{}{}:
	default: // a wake-up is pending: reportHealth will read the health then
	}
}

// reportHealth logs the health changes and tells OnHealth, one call at a
// time. Woken by setHealth, it reads the health itself and reports it only
// if it differs from what it reported last: reports alternate, and the
// last is the current health, however concurrent changes raced and
// however long OnHealth took.
func (s *Store) reportHealth() {
	reported := true // a store starts up
	for {
		select {
		case <-s.done:
			return
		case <-s.health:
		}
		up := s.up.Load()
		if up == reported {
			continue
		}
		reported = up
		var err error
		if !up {
			if e := s.lastErr.Load(); e != nil {
				err = *e
			}
			s.log.Warn("redis failed; deciding by the failure mode", "failure_mode", s.mode.String(), "err", err)
		} else {
			s.log.Info("redis is reachable again; deciding from Redis")
		}
		if s.onHealth != nil {
			s.onHealth(up, err)
		}
	}
}

// Ping asks Redis (every node of a cluster) for PONG within the store's
// timeout, and marks the store up or down by the answer. While the circuit
// breaker is open, it probes instead, once the cool-off has passed (as a
// request would, so that the store recovers without traffic): it runs the
// settle script with no request, which a Redis that holds scripts does not
// answer either; the probe's success closes the breaker and marks the
// store up. Before the cool-off has passed it returns an error at once,
// asking nothing. When ctx ends first, it returns ctx's error and leaves
// the health as it was.
func (s *Store) Ping(ctx context.Context) error {
	if s.breaker.State() != BreakerClosed {
		return s.probe(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachShard(pctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = s.client.Ping(pctx).Err()
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	err = s.explain(err)
	if err == nil && s.breaker.State() != BreakerClosed {
		return nil // the breaker opened meanwhile: only a probe closes it
	}
	s.breaker.done(false, err, 0, s.local.Now())
	s.setHealth(err)
	return err
}

// errCoolingOff is Ping's error while the open breaker cools off.
var errCoolingOff = errors.New("redis: circuit breaker open, cooling off")

// probe is Ping's probe of a breaker that is not closed.
func (s *Store) probe(ctx context.Context) error {
	ok, probe := s.breaker.allow(s.local.Now())
	if !ok {
		return errCoolingOff // or a request is probing
	}
	pctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	args := settleHead(redisTime, true, false, 0)
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachShard(pctx, func(ctx context.Context, c *goredis.Client) error {
			return settleScript.Run(ctx, c, nil, args...).Err()
		})
	} else {
		err = settleScript.Run(pctx, s.client, nil, args...).Err()
	}
	if err != nil && ctx.Err() != nil {
		s.breaker.release(probe)
		return ctx.Err()
	}
	err = s.explain(err)
	s.breaker.done(probe, err, 0, s.local.Now())
	s.setHealth(err)
	return err
}

// Run pings Redis at once and then every interval until ctx is done, so
// that health follows Redis even without traffic, and drops expired
// deny-cache entries.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for ctx.Err() == nil {
		s.Ping(ctx)
		if s.cache != nil {
			s.cache.sweep(s.localNow())
		}
		select {
		case <-ctx.Done():
		case <-t.C:
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
