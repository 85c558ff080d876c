// Package redis is the store that keeps bucket states in Redis, so that
// several daemons behind a load balancer share one set of limits.
//
// Apply decides exactly as the memory store does (by the settle rule of
// package store, over algorithms' arithmetic), inside Redis, in a Lua script
// that decides at Redis TIME: every daemon sharing a Redis decides on the
// Redis server's clock. Config.Clock is the one way to give the store
// another time (Config.Counters, tests); a key's expiry derives from the
// scripts' now either way (see Config.Clock and Config.Linger). A request
// costs at most one round trip per Redis node, shared by the requests sent
// together (batch.go). A bucket is one Redis string under Config.KeyPrefix
// and the "{domain}" hash tag (unless Config.SpreadKeys), that expires
// when the bucket is back at rest.
//
// With the hash tag, a request is one script on one node, atomic. With
// Config.SpreadKeys on a cluster, a request whose buckets are in several
// slots is settled per slot: each slot's share is atomic, the request is
// admitted only if every share admitted and its quotas (the settle
// rule, decided over every share's decisions) do not deny it, and the shares
// charged are undone (best effort) when another denied or failed.
//
// Apply returns an error when Redis fails, answers after Config.Timeout,
// or refuses the daemon for its configuration (a *guard.ConfigError: an
// ACL without a command the store uses, a wrong password; Check finds
// them before any request does): the Store is meant to be wrapped by
// internal/store/guard, which then decides by the failure mode.
// A script is never sent twice: a request whose exchange failed may have
// been charged.
//
// docs/redis.md describes the design, the scripts, Redis Cluster, faults
// and the measurements.
package redis

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
)

// Defaults and bounds of Config.
const (
	DefaultTimeout   = 250 * time.Millisecond
	DefaultKeyPrefix = "ratelimitd:"
	// MaxLinger bounds Config.Linger: a century.
	MaxLinger = 100 * 365 * 24 * time.Hour
)

// Config says where Redis is and how to use it.
type Config struct {
	// Addr is a standalone Redis's host:port.
	Addr string
	// ClusterAddrs are seed addresses of a Redis Cluster; when set, Addr
	// must be empty.
	ClusterAddrs []string
	// SentinelMaster, with SentinelAddrs (and Addr empty), reaches the
	// master of that name through Redis Sentinel: the client asks the
	// sentinels for the master's address, and follows a failover when
	// they announce one (go-redis's failover client). TLS applies to the
	// sentinels and the master alike.
	SentinelMaster string
	SentinelAddrs  []string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (Username and Password to the master); both optional.
	SentinelUsername, SentinelPassword string
	// Username and Password authenticate (AUTH); both optional.
	Username, Password string
	// TLS, when not nil, connects over TLS with this configuration.
	TLS *tls.Config
	// Timeout bounds each Apply's exchange with Redis (0: DefaultTimeout).
	Timeout time.Duration
	// KeyPrefix starts every key (empty: DefaultKeyPrefix).
	KeyPrefix string
	// SpreadKeys leaves out the {domain} hash tag, so that a domain's
	// buckets spread over a cluster's nodes; requests whose buckets are in
	// several slots are then settled per slot (see the package doc).
	SpreadKeys bool
	// Counters keeps the fixed windows of the charges that carry a
	// store.Charge.Counter (engine.WithCounterKeys) as envoyproxy/ratelimit
	// keeps its counters, when their period is a whole number of seconds
	// below 2^49 ns (a second, minute, hour or day, or a multiple): a plain
	// count under KeyPrefix, the charge's Counter and the window's start in
	// Unix seconds ("<domain>_<key>_<value>_…_<start>"), without a hash
	// tag, expiring when the window ends. Upstream and ratelimitd then
	// continue each other's counts. Every other bucket keeps its own key.
	//
	// The key names the window, so the daemon must know the window before
	// Redis decides: with Counters, the scripts decide at Clock's time
	// (when Clock is nil, the system's in whole milliseconds, so that the
	// requests of a millisecond share a script call, as on Redis TIME they
	// share one), rather than Redis TIME, as upstream decides at each
	// daemon's own clock (keep the daemons' clocks in sync). An empty
	// KeyPrefix is then no prefix, as upstream's CACHE_KEY_PREFIX.
	Counters bool
	// Clock is the one way to give the store a time other than Redis's:
	// when set, the scripts decide at its time, and the quota ledger keeps
	// its leases on it, instead of Redis TIME (nil). Every daemon sharing
	// the Redis should then share the clock (a test's fake clock does).
	//
	// Expiry derives from the scripts' now, whichever clock gives it: a
	// key expires when its bucket is back at rest (a ledger's key when its
	// last lease ends), measured from now (PX), plus Linger.
	Clock clock.Clock
	// Linger is how long a key outlives its bucket's return to rest
	// (0: not at all; at most MaxLinger). A clock that steps back by less
	// than Linger finds the bucket's state rather than a fresh bucket;
	// tests whose fake clock jumps anywhere, and stands still while Redis's
	// runs, set one longer than their timeline, so that no key expires
	// under them.
	Linger time.Duration
	// Logger receives the store's state changes (nil: slog.Default()).
	Logger *slog.Logger
}

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	client   goredis.UniversalClient
	cluster  *goredis.ClusterClient // nil for a standalone Redis
	prefix   string
	spread   bool
	counters bool // Config.Counters
	timeout  time.Duration
	log      *slog.Logger

	clock  clock.Clock // Config.Clock (with Counters, never nil); nil: Redis TIME
	linger string      // Config.Linger in milliseconds, as the scripts take it

	queue   chan *call         // requests waiting for a sender (batch.go)
	specs   chargeSpecs        // the charges' strings for settle.lua
	batches atomic.Uint64      // batches sent so far
	life    context.Context    // ends when the store closes: cuts short what is in flight
	end     context.CancelFunc // ends life

	lastDial atomic.Pointer[error] // the last failure to connect, nil once a connection succeeded (dialHook)
	done     chan struct{}
	warmed   chan struct{} // closed when warm is done
	closing  sync.Once

	stats   stats
	metrics histograms
}

// stats are the store's counters, read by its metrics.
type stats struct {
	applies    atomic.Uint64 // Apply calls that asked Redis
	roundTrips atomic.Uint64 // commands and pipelines sent to a node
	undos      atomic.Uint64 // shares undone after another slot denied or failed
	fast       atomic.Uint64 // charges the script decided on plain numbers (fast.lua)
	bignum     atomic.Uint64 // charges the script decided on bignums
}

// New connects to Redis as cfg says. It does not wait for Redis.
func New(cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		prefix:   cfg.KeyPrefix,
		spread:   cfg.SpreadKeys,
		counters: cfg.Counters,
		timeout:  cfg.Timeout,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		linger:   strconv.FormatInt(cfg.Linger.Milliseconds(), 10),
		done:     make(chan struct{}),
		warmed:   make(chan struct{}),
		queue:    make(chan *call, 4*maxBatch),
	}
	s.life, s.end = context.WithCancel(context.Background())
	s.metrics = newHistograms()
	SetClientLogger(cfg.Logger)
	s.client, s.cluster = newClient(cfg, roundTripHook{&s.stats.roundTrips}, dialHook{&s.lastDial})
	go s.sender()
	go s.warm()
	return s, nil
}

// withDefaults checks cfg and returns it with its defaults filled in.
func (cfg Config) withDefaults() (Config, error) {
	switch {
	case btoi(cfg.Addr != "")+btoi(len(cfg.ClusterAddrs) > 0)+btoi(len(cfg.SentinelAddrs) > 0) != 1:
		return cfg, errors.New("redis: set exactly one of an address, cluster addresses and sentinel addresses")
	case (cfg.SentinelMaster == "") != (len(cfg.SentinelAddrs) == 0):
		return cfg, errors.New("redis: sentinel addresses need the master's name, and the master's name sentinel addresses")
	case cfg.Timeout < 0:
		return cfg, errors.New("redis: timeout must not be negative")
	case cfg.Linger < 0 || cfg.Linger > MaxLinger:
		return cfg, fmt.Errorf("redis: linger %v out of range [0, %v]", cfg.Linger, MaxLinger)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KeyPrefix == "" && !cfg.Counters {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Counters && cfg.Clock == nil {
		cfg.Clock = wholeMilliseconds{clock.NewMonotonic()}
	}
	return cfg, nil
}

// wholeMilliseconds is Config.Counters' clock when Config.Clock is nil: the
// system's, in whole milliseconds, so that the requests of a millisecond
// share a script call, as on Redis TIME they share one.
type wholeMilliseconds struct{ c clock.Clock }

func (w wholeMilliseconds) Now() int64 { return w.c.Now() / 1e6 * 1e6 }

// newClient returns the client of the Redis cfg names (and it as a
// cluster client, for a cluster), its commands counted by count and its
// failures to connect kept by dial.
//
// No retries: a script that reached Redis before the connection broke may
// have charged, and running it again would charge twice. MaxRetries -1
// turns off the retries after errors. The cluster client also retries —
// after errors as on MOVED and ASK, commands and pipelines alike — up to
// MaxRedirects: -1 turns that off too, so that a redirected request is
// decided by the failure mode while the client reloads its slot map (which
// a MOVED starts).
//
// Connections: the pipelines' pool has one for every batch that may be in
// flight (maxInFlight), made ready as the store starts (warm) and never
// closed for being idle, and the handshake is HELLO alone (no CLIENT
// MAINT_NOTIFICATIONS, which Redis 7 refuses): each handshake costs a
// round trip, which a request far from Redis cannot afford on top of its
// own.
func newClient(cfg Config, count roundTripHook, dial dialHook) (goredis.UniversalClient, *goredis.ClusterClient) {
	noMaint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch {
	case len(cfg.SentinelAddrs) > 0:
		// As a standalone Redis's, with a master that may move. On a
		// failover, go-redis closes the connections to the old master;
		// requests in flight on them are decided by the failure mode
		// (never sent again: no retries), the next go to the new master.
		c := goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName:            cfg.SentinelMaster,
			SentinelAddrs:         cfg.SentinelAddrs,
			SentinelUsername:      cfg.SentinelUsername,
			SentinelPassword:      cfg.SentinelPassword,
			Username:              cfg.Username,
			Password:              cfg.Password,
			TLSConfig:             cfg.TLS,
			MaxRetries:            -1,
			PipelinePoolSize:      maxInFlight,
			ConnMaxIdleTime:       -1,
			ContextTimeoutEnabled: true,
			DisableIdentity:       true,
		})
		addHooks(c, count, dial)
		return c, nil
	case cfg.Addr != "":
		c := goredis.NewClient(&goredis.Options{
			Addr:                     cfg.Addr,
			Username:                 cfg.Username,
			Password:                 cfg.Password,
			TLSConfig:                cfg.TLS,
			MaxRetries:               -1,
			PipelinePoolSize:         maxInFlight,
			ConnMaxIdleTime:          -1,
			MaintNotificationsConfig: noMaint,
			ContextTimeoutEnabled:    true,
			DisableIdentity:          true,
		})
		addHooks(c, count, dial)
		return c, nil
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:                    cfg.ClusterAddrs,
		Username:                 cfg.Username,
		Password:                 cfg.Password,
		TLSConfig:                cfg.TLS,
		MaxRetries:               -1,
		MaxRedirects:             -1,
		PipelinePoolSize:         maxInFlight,
		ConnMaxIdleTime:          -1,
		MaintNotificationsConfig: noMaint,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
	})
	c.OnNewNode(func(n *goredis.Client) { addHooks(n, count, dial) })
	return c, c
}

func addHooks(c interface{ AddHook(goredis.Hook) }, hooks ...goredis.Hook) {
	for _, h := range hooks {
		c.AddHook(h)
	}
}

// warm makes the connections of maxInFlight batches at once, so that the
// batches that a Redis far away makes overlap find them ready, and then
// closes s.warmed. A connection's handshake is a round trip of its own: it
// has a timeout of 5s, not the store's.
func (s *Store) warm() {
	defer close(s.warmed)
	ctx, cancel := context.WithTimeout(s.life, max(s.timeout, 5*time.Second))
	defer cancel()
	s.eachNode(ctx, 0, func(ctx context.Context, c goredis.Cmdable) error {
		var wg sync.WaitGroup
		for range maxInFlight {
			wg.Go(func() {
				c.Pipelined(ctx, func(p goredis.Pipeliner) error { return p.Ping(ctx).Err() })
			})
		}
		wg.Wait()
		return nil
	})
}

// Close cuts short every exchange with Redis in flight (their Apply calls
// fail, or end with their caller's context) and closes the connections to
// Redis.
func (s *Store) Close() error {
	s.closing.Do(func() {
		close(s.done)
		s.end()
	})
	return s.client.Close()
}

// Apply implements store.Store, as the package doc describes: it returns
// an error when Redis fails or answers after Config.Timeout (a
// *guard.SharedFailure when the exchange carried other requests too, a
// *guard.DeniedElsewhere when a failed slot's share did not matter to a
// request another slot denied, wrapped in a *guard.ConfigError when Redis
// refused the daemon for its configuration: see Check), and the caller's
// context's error when it ends first. A failure caused by a connection that could not be made
// says why it could not (say, connection refused) rather than that the
// deadline passed.
func (s *Store) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	if len(charges) == 0 {
		return nil
	}
	s.stats.applies.Add(1)
	err := s.settle(ctx, charges, decisions)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return configError(s.explain(err))
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

// settle runs the script (settleAt) at the scripts' now: Config.Clock's
// (nowArgs), or Redis TIME without a clock. Every decision of the request
// is reported at one instant (algorithms.Decision.At): the clock's time;
// on Redis TIME the script's, the earliest of its shares' when a cluster
// settled it per slot (each node reads its own TIME; the earliest never
// places a later refund of the request in a window it was not charged
// in before the shares' instants). A request that failed, even in part
// (a failure mode or a *guard.DeniedElsewhere decides), has At 0: no
// one instant decided it all.
func (s *Store) settle(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	now, at := redisTime, int64(0)
	if s.clock != nil {
		at = s.clock.Now()
		now = nowArgs(at)
	}
	err := s.settleAt(ctx, now, charges, decisions)
	switch {
	case err != nil:
		at = 0
	case s.clock == nil && len(decisions) > 0:
		at = decisions[0].At
		for i := range decisions {
			at = min(at, decisions[i].At)
		}
	}
	for i := range decisions {
		decisions[i].At = at
	}
	return err
}

// settleAt runs the script at now: once for the whole request, or per
// slot, within the store's timeout.
func (s *Store) settleAt(ctx context.Context, now [2]string, charges []store.Charge, decisions []algorithms.Decision) error {
	var keys []string
	var counters []bool
	if s.counters {
		keys, counters = s.counterKeys(charges, now)
	}
	if counters == nil {
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
		keys = make([]string, len(charges))
		for i := range charges {
			n := redisKeyLen(s.prefix, charges[i].Domain, charges[i].Key, s.spread)
			keys[i], joined = joined[:n], joined[n:]
		}
	}
	all := indexes(len(charges))
	if s.cluster == nil || len(charges) == 1 {
		return s.settleOne(ctx, keys, all, now, charges, decisions, counters)
	}
	groups := groupBySlot(keys, all)
	if len(groups) == 1 {
		return s.settleOne(ctx, keys, all, now, charges, decisions, counters)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.settleSlots(ctx, keys, groups, now, charges, decisions, counters)
}

// counterKeys returns the keys of charges with Config.Counters at the
// scripts' now, and which of them are counters (counterKey); nil, nil when
// none is (then every key is redisKey's), and always when the scripts read
// Redis TIME (not with Counters; Check's keys).
func (s *Store) counterKeys(charges []store.Charge, now [2]string) ([]string, []bool) {
	if now[0] == "" {
		return nil, nil
	}
	var counters []bool
	for i := range charges {
		if charges[i].Counter != nil && isCounter(charges[i].Limit) {
			if counters == nil {
				counters = make([]bool, len(charges))
			}
			counters[i] = true
		}
	}
	if counters == nil {
		return nil, nil
	}
	ms, _ := strconv.ParseInt(now[0], 10, 64)
	sub, _ := strconv.ParseInt(now[1], 10, 64)
	t := ms*1e6 + sub
	keys := make([]string, len(charges))
	var buf []byte
	for i := range charges {
		c := &charges[i]
		if counters[i] {
			buf = counterKey(buf[:0], s.prefix, c.Counter, t, c.Limit.Period())
		} else {
			buf = redisKey(buf[:0], s.prefix, c.Domain, c.Key, s.spread)
		}
		keys[i] = string(buf)
	}
	return keys, counters
}

// settleOne settles the charges idx, all in one slot, in one script call
// that a sender may share with other requests (batch.go), within the
// store's timeout.
func (s *Store) settleOne(ctx context.Context, keys []string, idx []int, now [2]string, charges []store.Charge, decisions []algorithms.Decision, counters []bool) error {
	c := &call{
		ctx:      ctx,
		deadline: time.Now().Add(s.timeout),
		keys:     keys,
		args:     appendRequest(make([]any, 0, 1+argsPerCharge*len(idx)), &s.specs, charges, idx, counters),
		now:      now,
		done:     make(chan struct{}),
	}
	if s.cluster != nil {
		c.slot = slotOf([]byte(keys[0]))
	}
	if err := s.send(ctx, c); err != nil {
		return err
	}
	return s.decode(c.reply.decisions, c.reply.at, idx, decisions)
}

// decode writes the decisions elems holds (settleReply.decisions), made
// at the instant at, into decisions[idx[j]] and counts their paths.
func (s *Store) decode(elems []any, at int64, idx []int, decisions []algorithms.Decision) error {
	fast, err := decodeDecisions(elems, idx, decisions, at)
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
func (s *Store) settleSlots(ctx context.Context, keys []string, groups [][]int, now [2]string, charges []store.Charge, decisions []algorithms.Decision, counters []bool) error {
	groupKeys := make([][]string, len(groups))
	for g, idx := range groups {
		for _, i := range idx {
			groupKeys[g] = append(groupKeys[g], keys[i])
		}
	}
	args := make([][]any, len(groups))
	for g, idx := range groups {
		args[g] = appendRequest(s.settleHead(now, true, 1), &s.specs, charges, idx, counters)
	}
	cmds := s.runScripts(ctx, groupKeys, args)
	replies, failed, failure, denied := shareReplies(cmds, groups)
	if failure == nil && !denied {
		for g, idx := range groups {
			if err := s.decode(replies[g].decisions, replies[g].at, idx, decisions); err != nil {
				return err
			}
		}
		// The shares do not decide the request's quotas (settle.lua's try
		// mode): its quotas may span slots. Decided here, over them all.
		if !store.QuotasDeny(charges, decisions) {
			return nil
		}
		denied = true
	}

	// Undo the shares that were charged, on a deadline of the undo's own:
	// the request's may have passed (a node that timed out).
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	err := s.undo(uctx, groups, groupKeys, replies, now)
	cancel()
	if err != nil {
		s.log.Warn("redis: undoing the charges of a request that was not admitted failed; they stand", "err", err)
	}
	if !denied {
		return failure // decided by the failure mode
	}
	return s.deniedBySlot(groups, replies, failed, failure, decisions)
}

// shareReplies returns the replies of the shares' scripts cmds (one per
// group), which of them failed, the first failure, and whether a share
// denied the request.
func shareReplies(cmds []*goredis.Cmd, groups [][]int) (replies []settleReply, failed []bool, failure error, denied bool) {
	replies = make([]settleReply, len(groups))
	failed = make([]bool, len(groups))
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
	return replies, failed, failure, denied
}

// deniedBySlot writes the decisions of a request a share denied: it is
// denied whatever the failed shares would have said. The charged shares
// are reported as peeks (the settle rule), and only the failed shares are
// left to the failure mode (a *guard.DeniedElsewhere when some failed).
func (s *Store) deniedBySlot(groups [][]int, replies []settleReply, failed []bool, failure error, decisions []algorithms.Decision) error {
	var failedIdx []int
	for g, idx := range groups {
		var err error
		switch {
		case failed[g]:
			failedIdx = append(failedIdx, idx...)
		case replies[g].committed:
			err = s.decode(replies[g].peeks, replies[g].at, idx, decisions)
		default:
			err = s.decode(replies[g].decisions, replies[g].at, idx, decisions)
		}
		if err != nil {
			return err
		}
	}
	if failure != nil {
		return &guard.DeniedElsewhere{Err: failure, Failed: failedIdx}
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
func (s *Store) undo(ctx context.Context, groups [][]int, groupKeys [][]string, replies []settleReply, now [2]string) error {
	pipe := s.client.Pipeline()
	n := 0
	for g := range groups {
		r := &replies[g]
		if !r.committed || len(r.writes) == 0 {
			continue
		}
		var keys []string
		args := []any{now[0], now[1], s.linger}
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

// Ping asks Redis (every node of a cluster) for PONG within the store's
// timeout (guard.Remote). When ctx ends first, it returns ctx's error.
func (s *Store) Ping(ctx context.Context) error {
	return s.eachNode(ctx, s.timeout, func(ctx context.Context, c goredis.Cmdable) error {
		return c.Ping(ctx).Err()
	})
}

// Probe runs the settle script with no request on Redis (every node of a
// cluster) within the store's timeout (guard.Remote): a Redis that holds
// scripts (paused, busy) does not answer it, though it answers PING. When
// ctx ends first, it returns ctx's error.
func (s *Store) Probe(ctx context.Context) error {
	args := s.settleHead(redisTime, false, 0)
	return s.eachNode(ctx, s.timeout, func(ctx context.Context, c goredis.Cmdable) error {
		return settleScript.Run(ctx, c, nil, args...).Err()
	})
}

// eachNode runs f on Redis (every node of a cluster, at once) within
// timeout (0: ctx's deadline alone), and returns its error, explained, or
// ctx's when ctx ended first.
func (s *Store) eachNode(ctx context.Context, timeout time.Duration, f func(context.Context, goredis.Cmdable) error) error {
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		pctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachShard(pctx, func(ctx context.Context, c *goredis.Client) error { return f(ctx, c) })
	} else {
		err = f(pctx, s.client)
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return configError(s.explain(err))
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

// Applies returns how many Apply calls asked Redis (with charges).
func (s *Store) Applies() uint64 { return s.stats.applies.Load() }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
