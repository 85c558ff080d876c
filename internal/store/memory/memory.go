// Package memory is the in-process store: bucket states in sharded maps,
// each shard behind its own mutex, bounded in size.
//
// # Concurrency
//
// A request's charges are settled under the locks of every shard they touch,
// taken in ascending shard order (so two requests never wait on each other
// in a cycle), with the clock read once all are held. Requests on different
// shards proceed in parallel; there is no global lock.
//
// # Reclaiming and bounding memory
//
// A bucket back at rest (algorithms.State.AtRest) is indistinguishable from
// a new one, so deleting it loses nothing. Buckets are reclaimed without a
// timer per bucket: every insertion into a shard first looks at a couple of
// the shard's other buckets and deletes those at rest, and Sweep (run
// periodically by one goroutine for the whole store) deletes every bucket at
// rest and shrinks maps that have emptied.
//
// The store holds at most MaxBuckets buckets (split evenly across shards).
// When a new bucket arrives at a full shard, the store samples up to 16 of
// the shard's buckets and deletes those at rest; if none is, it evicts the
// sampled bucket that would come to rest soonest. An evicted bucket starts
// over at rest, so its key may briefly be admitted more than its limit: the
// bound trades that, for keys that have nearly recovered anyway, against a
// flood of unique keys exhausting memory.
package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// DefaultMaxBuckets is the default bound on the number of buckets held:
// about 100 MB of state at the measured ~100 bytes per bucket.
const DefaultMaxBuckets = 1_000_000

const (
	defaultShards = 256
	// insertReclaim is how many other buckets an insertion inspects for
	// reclaiming; evictSample is how many a full shard samples.
	insertReclaim = 2
	evictSample   = 16
	// maxStack is how many charges Apply settles without allocating.
	maxStack = 16
)

// Store is the sharded in-memory store. It is safe for concurrent use.
type Store struct {
	clock    clock.Clock
	seed     maphash.Seed
	shards   []shard
	mask     uint64
	perShard int

	evictions atomic.Uint64
}

type shard struct {
	mu      sync.Mutex
	buckets map[string]algorithms.State
	// peak is the most buckets held since the map was last rebuilt; Go
	// maps do not shrink, so Sweep rebuilds a map that has emptied.
	peak int
	_    [40]byte // keep hot shards on separate cache lines
}

// Option configures a Store.
type Option func(*options)

type options struct {
	maxBuckets int
	shards     int
}

// WithMaxBuckets bounds the number of buckets held (default
// DefaultMaxBuckets). Values below the shard count are raised to it.
func WithMaxBuckets(n int) Option { return func(o *options) { o.maxBuckets = n } }

// WithShards sets the number of shards, rounded up to a power of two
// (default 256).
func WithShards(n int) Option { return func(o *options) { o.shards = n } }

// New returns an empty store reading time from c.
func New(c clock.Clock, opts ...Option) *Store {
	o := options{maxBuckets: DefaultMaxBuckets, shards: defaultShards}
	for _, opt := range opts {
		opt(&o)
	}
	n := 1
	for n < o.shards {
		n <<= 1
	}
	if o.maxBuckets < n {
		o.maxBuckets = n
	}
	s := &Store{
		clock:    c,
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		perShard: (o.maxBuckets + n - 1) / n,
	}
	for i := range s.shards {
		s.shards[i].buckets = make(map[string]algorithms.State)
	}
	return s
}

func (s *Store) shardOf(key []byte) int {
	return int(maphash.Bytes(s.seed, key) & s.mask)
}

// Apply implements store.Store. It never returns an error.
func (s *Store) Apply(_ context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	if len(charges) == 1 {
		s.applyOne(&charges[0], &decisions[0])
		return nil
	}

	var shardBuf [maxStack]int
	var stateBuf [maxStack]algorithms.State
	shardOf, states := shardBuf[:0], stateBuf[:0]
	if len(charges) > maxStack {
		shardOf = make([]int, 0, len(charges))
		states = make([]algorithms.State, 0, len(charges))
	}
	for i := range charges {
		shardOf = append(shardOf, s.shardOf(charges[i].Key))
	}
	// Lock each distinct shard once, in ascending order.
	var orderBuf [maxStack]int
	lockOrder := append(orderBuf[:0], shardOf...)
	slices.Sort(lockOrder)
	lockOrder = slices.Compact(lockOrder)
	for _, sh := range lockOrder {
		s.shards[sh].mu.Lock()
	}

	now := s.clock.Now()
	for i := range charges {
		states = append(states, s.shards[shardOf[i]].buckets[string(charges[i].Key)])
	}
	if store.Settle(charges, states, now, decisions) {
		for i := range charges {
			if charges[i].Cost != 0 && decisions[i].Code == algorithms.Allowed {
				s.put(&s.shards[shardOf[i]], charges[i].Key, states[i], now)
			}
		}
	}

	for _, sh := range lockOrder {
		s.shards[sh].mu.Unlock()
	}
	return nil
}

// applyOne is Apply for a single charge: one lock, no sorting.
func (s *Store) applyOne(c *store.Charge, d *algorithms.Decision) {
	sh := &s.shards[s.shardOf(c.Key)]
	sh.mu.Lock()
	now := s.clock.Now()
	next, dec := c.Limit.Decide(sh.buckets[string(c.Key)], now, c.Cost)
	*d = dec
	if c.Cost != 0 && dec.Code == algorithms.Allowed {
		s.put(sh, c.Key, next, now)
	}
	sh.mu.Unlock()
}

// put stores a charged state. The shard's lock must be held.
func (s *Store) put(sh *shard, key []byte, st algorithms.State, now int64) {
	if _, ok := sh.buckets[string(key)]; ok {
		sh.buckets[string(key)] = st
		return
	}
	s.makeRoom(sh, now)
	sh.buckets[string(key)] = st
	if n := len(sh.buckets); n > sh.peak {
		sh.peak = n
	}
}

// makeRoom reclaims buckets at rest among a few others before an insertion,
// and evicts one if the shard is still full. The shard's lock must be held.
func (s *Store) makeRoom(sh *shard, now int64) {
	full := len(sh.buckets) >= s.perShard
	sample := insertReclaim
	if full {
		sample = evictSample
	}
	var victim string
	victimRest := int64(0)
	seen := 0
	for k, st := range sh.buckets {
		if st.AtRest(now) {
			delete(sh.buckets, k)
			full = false
		} else if victim == "" || st.RestAt() < victimRest {
			victim, victimRest = k, st.RestAt()
		}
		if seen++; seen >= sample {
			break
		}
	}
	if full && victim != "" {
		delete(sh.buckets, victim)
		s.evictions.Add(1)
	}
}

// Sweep deletes every bucket at rest and shrinks shards whose maps have
// emptied to under a quarter of their peak. It locks one shard at a time.
func (s *Store) Sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.clock.Now()
		for k, st := range sh.buckets {
			if st.AtRest(now) {
				delete(sh.buckets, k)
			}
		}
		if n := len(sh.buckets); sh.peak > 64 && n < sh.peak/4 {
			fresh := make(map[string]algorithms.State, n)
			for k, st := range sh.buckets {
				fresh[k] = st
			}
			sh.buckets, sh.peak = fresh, n
		}
		sh.mu.Unlock()
	}
}

// Run calls Sweep every interval until ctx is done: the one goroutine that
// reclaims idle buckets for the whole store.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Len returns the number of buckets held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many buckets not yet at rest were evicted to keep
// the store within its bound.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }
