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
// The store holds at most MaxBuckets buckets. When a new bucket arrives at
// a full store, the store samples up to 16 of the buckets in the new one's
// shard and deletes those at rest; if none is, it evicts the sampled bucket
// that would come to rest soonest. (Only when that shard holds no bucket at
// all does the insertion go ahead without one leaving, so the bound can be
// passed by at most one bucket per shard.) An evicted bucket starts
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
	clock      clock.Clock
	seed       maphash.Seed
	shards     []shard
	mask       uint64
	maxBuckets int64

	buckets   atomic.Int64 // buckets held, across shards
	evictions atomic.Uint64
}

// shard keeps its buckets' states in a slab indexed by a map, so that
// charging an existing bucket writes the slab and allocates nothing (a Go
// map re-stores a string key on every assignment).
type shard struct {
	mu     sync.Mutex
	index  map[string]uint32 // key -> position in states
	states []algorithms.State
	free   []uint32 // positions in states no key uses
	_      [24]byte // keep hot shards on separate cache lines
}

// Option configures a Store.
type Option func(*options)

type options struct {
	maxBuckets int
	shards     int
}

// WithMaxBuckets bounds the number of buckets held (default
// DefaultMaxBuckets).
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
	s := &Store{
		clock:      c,
		seed:       maphash.MakeSeed(),
		shards:     make([]shard, n),
		mask:       uint64(n - 1),
		maxBuckets: int64(max(o.maxBuckets, 1)),
	}
	for i := range s.shards {
		s.shards[i].index = make(map[string]uint32)
	}
	return s
}

func (s *Store) shardOf(key []byte) int {
	return int(maphash.Bytes(s.seed, key) & s.mask)
}

// absent marks a charge whose bucket the shard does not hold.
const absent = ^uint32(0)

func (sh *shard) lookup(key []byte) (algorithms.State, uint32) {
	if i, ok := sh.index[string(key)]; ok {
		return sh.states[i], i
	}
	return algorithms.State{}, absent
}

// Apply implements store.Store. It never returns an error.
func (s *Store) Apply(_ context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	if len(charges) == 1 {
		s.applyOne(&charges[0], &decisions[0])
		return nil
	}

	var shardBuf, orderBuf [maxStack]int
	var posBuf [maxStack]uint32
	var stateBuf [maxStack]algorithms.State
	shardOf, pos, states := shardBuf[:0], posBuf[:0], stateBuf[:0]
	for i := range charges {
		shardOf = append(shardOf, s.shardOf(charges[i].Key))
	}
	// Lock each distinct shard once, in ascending order.
	lockOrder := append(orderBuf[:0], shardOf...)
	slices.Sort(lockOrder)
	lockOrder = slices.Compact(lockOrder)
	for _, sh := range lockOrder {
		s.shards[sh].mu.Lock()
	}

	now := s.clock.Now()
	for i := range charges {
		st, p := s.shards[shardOf[i]].lookup(charges[i].Key)
		states, pos = append(states, st), append(pos, p)
	}
	if store.Settle(charges, states, now, decisions) {
		// Buckets the shards hold first, at the places looked up above; then
		// new ones, whose insertion may reclaim places (and so would move
		// the ground under a later write by place).
		for _, inserting := range [2]bool{false, true} {
			for i := range charges {
				if charges[i].Cost != 0 && decisions[i].Code == algorithms.Allowed && (pos[i] == absent) == inserting {
					s.put(&s.shards[shardOf[i]], charges[i].Key, pos[i], states[i], now)
				}
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
	st, p := sh.lookup(c.Key)
	next, dec := c.Limit.Decide(st, now, c.Cost)
	*d = dec
	if c.Cost != 0 && dec.Code == algorithms.Allowed {
		s.put(sh, c.Key, p, next, now)
	}
	sh.mu.Unlock()
}

// put stores a charged state at position p, or inserts the bucket when p
// is absent. The shard's lock must be held.
func (s *Store) put(sh *shard, key []byte, p uint32, st algorithms.State, now int64) {
	if p != absent {
		sh.states[p] = st
		return
	}
	s.makeRoom(sh, now)
	if n := len(sh.free); n > 0 {
		p, sh.free = sh.free[n-1], sh.free[:n-1]
		sh.states[p] = st
	} else {
		p = uint32(len(sh.states))
		sh.states = append(sh.states, st)
	}
	sh.index[string(key)] = p
	s.buckets.Add(1)
}

// remove deletes a bucket. The shard's lock must be held.
func (s *Store) remove(sh *shard, key string, p uint32) {
	delete(sh.index, key)
	sh.states[p] = algorithms.State{}
	sh.free = append(sh.free, p)
	s.buckets.Add(-1)
}

// makeRoom reclaims buckets at rest among a few of the shard's others
// before an insertion and, when the store is full, evicts one. The shard's
// lock must be held.
func (s *Store) makeRoom(sh *shard, now int64) {
	full := s.buckets.Load() >= s.maxBuckets
	sample := insertReclaim
	if full {
		sample = evictSample
	}
	var victim string
	var victimPos uint32
	seen := 0
	for k, p := range sh.index {
		st := sh.states[p]
		if st.AtRest(now) {
			s.remove(sh, k, p)
			full = false
		} else if victim == "" || st.RestAt() < sh.states[victimPos].RestAt() {
			victim, victimPos = k, p
		}
		if seen++; seen >= sample {
			break
		}
	}
	if full && victim != "" {
		s.remove(sh, victim, victimPos)
		s.evictions.Add(1)
	}
}

// Sweep deletes every bucket at rest, and compacts shards that hold under
// a quarter of the room they have grown, so that memory is returned after
// a flood of keys. It locks one shard at a time.
func (s *Store) Sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.clock.Now()
		for k, p := range sh.index {
			if sh.states[p].AtRest(now) {
				s.remove(sh, k, p)
			}
		}
		if n := len(sh.index); len(sh.states) > 64 && n < len(sh.states)/4 {
			index := make(map[string]uint32, n)
			states := make([]algorithms.State, 0, n)
			for k, p := range sh.index {
				index[k] = uint32(len(states))
				states = append(states, sh.states[p])
			}
			sh.index, sh.states, sh.free = index, states, nil
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
func (s *Store) Len() int { return int(s.buckets.Load()) }

// Evictions returns how many buckets not yet at rest were evicted to keep
// the store within its bound.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }
