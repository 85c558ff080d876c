// Package memory is the in-process store: bucket states in sharded maps,
// each shard behind its own mutex, bounded in bytes and in count.
//
// # Concurrency
//
// A request's charges are settled under the locks of every shard they touch,
// taken in ascending shard order (so two requests never wait on each other
// in a cycle), with the clock read once all are held. Requests on different
// shards proceed in parallel; there is no global lock.
//
// # Layout
//
// A bucket is a stored key, an algorithms.State and the domain it belongs
// to (store.Charge.Domain). Each shard keeps its buckets' states and
// domains in a slab (a slice) and maps each stored key to its position
// there; positions no bucket uses are listed for reuse. A bucket lives in
// the shard its stored key hashes to.
//
// The stored key is the charge's key itself when that is at most
// MaxVerbatimKey bytes long and not exactly DigestSize bytes long;
// otherwise it is the key's digest: SipHash-2-4 of the key with its
// 128-bit output (DigestSize, 16 bytes), keyed by a seed of 16 random bytes
// drawn when the store is made and never shown. So a bucket holds at most
// MaxVerbatimKey bytes of key however long its key is, and verbatim keys
// and digests never meet (a digest is DigestSize bytes long, a verbatim key
// never is).
//
// Two distinct long keys share a bucket only if their digests collide.
// SipHash is a pseudorandom function: without the seed, a caller cannot
// compute a digest, so it cannot search for a collision offline, and it
// observes none online beyond sharing a bucket's decisions. Treating
// SipHash under a secret key as a random function of 128 bits, the chance
// that any two of N long keys ever charged collide is at most N²/2¹²⁹:
// below 2⁻⁴⁹ for N = 2⁴⁰ (a trillion keys). The digest depends on the
// seed, so a digested bucket means nothing to a store with another seed.
// (hash/maphash, which picks a bucket's shard, is faster, but Go documents
// it as not cryptographically secure, so two of its 64-bit values under two
// seeds make no 128-bit pseudorandom function; nor can another process
// compute it again, as a restored snapshot needs.)
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
// Each bucket is accounted BucketBytes(len(stored key)) bytes: its stored
// key as allocated, its map entry and its slab slot, both with the slack
// the map and the slab keep for growth; each domain holding buckets
// (store.Charge.Domain) is accounted 192 bytes and its name besides. The
// store holds at most MaxBytes accounted bytes and at most MaxBuckets
// buckets.
//
// # Fair shares
//
// The bounds are shared between domains, so that one tenant flooding the
// store with new keys cannot push out another's buckets. A domain's fair
// share of a bound is the bound divided by the number of domains holding
// buckets at the moment; a domain is over its share when its buckets, or
// its accounted bytes, pass its share of either bound. The store is not
// partitioned: a domain alone may fill it, and what one domain leaves
// unused another may take.
//
// When a new bucket would pass a bound, the store samples up to 16 of the
// buckets in the new one's shard and deletes those at rest; while the new
// bucket still does not fit, it evicts sampled buckets of domains over
// their fair share — the new bucket's own domain's first (counting the new
// bucket), then others', each group nearest rest first — busy or not. If
// that leaves no room, the new bucket is not kept (its charge is decided,
// then forgotten; counted as an eviction), unless its domain is within
// its share and the shard held fewer than 16 buckets: then it is kept past
// the bound, so that a nearly empty shard does not refuse a domain within
// its share. So:
//
//   - A bucket of a domain within its fair share is never evicted to make
//     room for another domain's bucket: only buckets at rest (which lose
//     nothing) and buckets of domains over their share give way.
//   - Buckets that never come to rest (a limit of 1 a day, say) cannot pin
//     memory: a domain over its share gives up its own buckets, busy or
//     not, or its new ones are not kept.
//   - Each bound is passed by at most 16 buckets per shard, and only by
//     domains within their share.
//   - A domain within its share that inserts into a full store keeps its
//     new bucket when the sample holds a bucket at rest or one of a domain
//     over its share (while one domain floods, nearly every sampled bucket
//     is the flood's); it is not guaranteed room otherwise.
//
// The counts are per domain and read without a lock, so a share is judged
// as of the moment of eviction while other shards insert. A domain is a
// string the caller sends: a caller that may use any domain (no
// authorization policy, or a grant of "*") can spread its buckets over
// many domains and so hold many shares; with an authorization policy that
// names each caller's domains, a caller's buckets hold at most the shares
// of those domains.
//
// An evicted bucket starts over at rest, so its key may briefly be
// admitted more than its limit: the bound trades that, for keys of a
// domain that holds more than its share, against a flood of unique keys
// exhausting memory. Evictions counts them.
package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"hash/maphash"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// DefaultMaxBytes is the default bound on the bytes of bucket state held
// (256 MiB): about 1.2 million buckets whose keys are stored as digests,
// 840 thousand of keys of MaxVerbatimKey bytes.
const DefaultMaxBytes = 256 << 20

// DefaultMaxBuckets is the default bound on the number of buckets held.
// With the defaults, it binds before DefaultMaxBytes while the buckets
// held average under 268 accounted bytes (stored keys under about 38
// bytes).
const DefaultMaxBuckets = 1_000_000

// MaxVerbatimKey is the longest key stored as it is; a longer key is
// stored as its DigestSize-byte digest.
const MaxVerbatimKey = 64

// DigestSize is the length of the digest a long key is stored as.
const DigestSize = 16

// bucketOverhead is what a bucket costs beyond its key's bytes: a
// map[string]uint32 entry (a 24-byte slot and a control byte, at a load
// factor that falls to 7/16 right after the map grows: up to 57 bytes), a
// 32-byte slab slot (up to 64 with append's doubling), 4 for the free
// list, and what a store that evicts as fast as it inserts leaves unused
// in the heap's pages. In such a store, BenchmarkBucketBytes measures
// 130 to 165 bytes of heap a bucket beyond twice its key; this rounds
// that up.
const bucketOverhead = 192

// BucketBytes returns the bytes a bucket whose stored key is n bytes long
// is accounted: bucketOverhead, and twice the key rounded up to the size
// of the allocation that holds it (Go's size classes: multiples of 8 up to
// 32 bytes, of 16 up to 128). Twice, because under a flood the garbage
// collector frees an evicted bucket's key only at its next cycle, and the
// heap keeps a page as long as any key on it lives: BenchmarkBucketBytes
// measures a store churning through new keys holding up to twice its keys'
// bytes in pages.
func BucketBytes(n int) int64 {
	switch {
	case n == 0:
	case n <= 32:
		n = (n + 7) &^ 7
	default:
		n = (n + 15) &^ 15
	}
	return bucketOverhead + 2*int64(n)
}

const (
	defaultShards = 256
	// insertReclaim is how many other buckets an insertion inspects for
	// reclaiming; evictSample is how many a full shard samples.
	insertReclaim = 2
	evictSample   = 16
	// maxStack is how many charges Apply settles without allocating.
	maxStack = 16
	// releaseBytes is how far the accounted bytes must fall below their
	// peak before Run hands the freed memory back to the operating system.
	releaseBytes = 32 << 20
)

// Store is the sharded in-memory store. It is safe for concurrent use.
type Store struct {
	clock      clock.Clock
	seed       maphash.Seed // picks a stored key's shard
	keySeed    [16]byte     // keys the digest of long keys (SipHash); secret
	shards     []shard
	mask       uint64
	maxBuckets int64
	maxBytes   int64

	buckets   atomic.Int64 // buckets held, across shards
	bytes     atomic.Int64 // their BucketBytes and the domains' DomainBytes, summed
	evictions atomic.Uint64

	domains sync.Map     // domain name -> *domain, for every domain holding a bucket
	active  atomic.Int64 // domains holding a bucket
}

// domain counts what one domain holds, for its fair share of the bounds.
type domain struct {
	name string
	// buckets is the number of buckets the domain holds, and -1 once it
	// has held none and is no longer in Store.domains: an entry that
	// reaches -1 is never used again.
	buckets atomic.Int64
	bytes   atomic.Int64 // their BucketBytes, summed, and its own DomainBytes
}

// domainOverhead is what a domain holding buckets costs beyond its name's
// bytes: its domain struct (32 bytes) and its entry in the sync.Map (an
// entry and its share of the trie's nodes, about 100 bytes), rounded up.
const domainOverhead = 192

// DomainBytes returns the bytes accounted for a domain whose name is n
// bytes long, while the domain holds a bucket: domainOverhead and the name
// rounded up to 16 bytes.
func DomainBytes(n int) int64 { return domainOverhead + int64(n+15)&^15 }

// shard keeps its buckets in a slab indexed by a map, so that charging an
// existing bucket writes the slab and allocates nothing (a Go map re-stores
// a string key on every assignment).
type shard struct {
	mu    sync.Mutex
	index map[string]uint32 // stored key -> position in slots
	slots []slot
	free  []uint32 // positions in slots no key uses
	last  *domain  // of the last bucket inserted (Store.acquire)
	_     [56]byte // keep hot shards on separate cache lines
}

// slot is one bucket's place in its shard's slab.
type slot struct {
	state algorithms.State
	owner *domain // the bucket's domain; nil for a free slot
}

// Option configures a Store.
type Option func(*options)

type options struct {
	maxBuckets int
	maxBytes   int64
	shards     int
}

// WithMaxBuckets bounds the number of buckets held (default
// DefaultMaxBuckets; at least 1).
func WithMaxBuckets(n int) Option { return func(o *options) { o.maxBuckets = n } }

// WithMaxBytes bounds the bytes of bucket state held, as BucketBytes
// accounts them (default DefaultMaxBytes; at least one bucket's worth).
func WithMaxBytes(n int64) Option { return func(o *options) { o.maxBytes = n } }

// WithShards sets the number of shards, rounded up to a power of two
// (default 256).
func WithShards(n int) Option { return func(o *options) { o.shards = n } }

// New returns an empty store reading time from c.
func New(c clock.Clock, opts ...Option) *Store {
	o := options{maxBuckets: DefaultMaxBuckets, maxBytes: DefaultMaxBytes, shards: defaultShards}
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
		maxBytes:   max(o.maxBytes, BucketBytes(MaxVerbatimKey)),
	}
	rand.Read(s.keySeed[:])
	for i := range s.shards {
		s.shards[i].index = make(map[string]uint32)
	}
	return s
}

// verbatim reports whether a key of n bytes is stored as it is.
func verbatim(n int) bool { return n <= MaxVerbatimKey && n != DigestSize }

// storedKey returns the key a bucket of key is stored under: key itself,
// or its digest written to buf. It inlines, so that a verbatim key costs
// no call.
func (s *Store) storedKey(key []byte, buf *[DigestSize]byte) []byte {
	if verbatim(len(key)) {
		return key
	}
	s.sum(key, buf)
	return buf[:]
}

// digest writes to buf the digest a bucket of key is stored under, and
// reports whether it did: false for a key stored as it is. It inlines.
func (s *Store) digest(key []byte, buf *[DigestSize]byte) bool {
	if verbatim(len(key)) {
		return false
	}
	s.sum(key, buf)
	return true
}

// sum writes key's digest to buf.
func (s *Store) sum(key []byte, buf *[DigestSize]byte) {
	lo, hi := sipHash128(binary.LittleEndian.Uint64(s.keySeed[:8]), binary.LittleEndian.Uint64(s.keySeed[8:]), key)
	binary.LittleEndian.PutUint64(buf[:8], lo)
	binary.LittleEndian.PutUint64(buf[8:], hi)
}

func (s *Store) shardOf(key []byte) int {
	return int(maphash.Bytes(s.seed, key) & s.mask)
}

// absent marks a charge whose bucket the shard does not hold.
const absent = ^uint32(0)

func (sh *shard) lookup(key []byte) (algorithms.State, uint32) {
	if i, ok := sh.index[string(key)]; ok {
		return sh.slots[i].state, i
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
	var digestBuf [maxStack][DigestSize]byte
	var digestedBuf [maxStack]bool
	shardOf, pos, states := shardBuf[:0], posBuf[:0], stateBuf[:0]
	digests, digested := digestBuf[:], digestedBuf[:]
	if len(charges) > maxStack {
		digests, digested = make([][DigestSize]byte, len(charges)), make([]bool, len(charges))
	}
	// key returns charge i's stored key. Apply keeps no slice of the
	// digests in a slice of its own, which would move them to the heap.
	key := func(i int) []byte {
		if digested[i] {
			return digests[i][:]
		}
		return charges[i].Key
	}
	for i := range charges {
		digested[i] = s.digest(charges[i].Key, &digests[i])
		shardOf = append(shardOf, s.shardOf(key(i)))
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
		st, p := s.shards[shardOf[i]].lookup(key(i))
		states, pos = append(states, st), append(pos, p)
	}
	admitted := store.Settle(charges, states, now, decisions)
	// Buckets the shards hold first, at the places looked up above; then
	// new ones, whose insertion may reclaim places (and so would move the
	// ground under a later write by place).
	for _, inserting := range [2]bool{false, true} {
		for i := range charges {
			if charges[i].Applied(decisions[i], admitted) && (pos[i] == absent) == inserting {
				s.put(&s.shards[shardOf[i]], key(i), charges[i].Domain, pos[i], states[i], now)
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
	var digest [DigestSize]byte
	key := s.storedKey(c.Key, &digest)
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	now := s.clock.Now()
	st, p := sh.lookup(key)
	next, dec := c.Decide(st, now)
	*d = dec
	if c.Applied(dec, true) {
		s.put(sh, key, c.Domain, p, next, now)
	}
	sh.mu.Unlock()
}

// put stores a charged state at position p, or inserts the bucket of
// stored key key, of domain dom, when p is absent and st is not at rest (a
// refund can leave a bucket at rest). The shard's lock must be held.
func (s *Store) put(sh *shard, key []byte, dom string, p uint32, st algorithms.State, now int64) {
	if p != absent {
		sh.slots[p].state = st
		return
	}
	if !st.AtRest(now) {
		s.insert(sh, key, dom, st, now)
	}
}

// insert inserts the bucket of stored key key, of domain dom, with state
// st. It reports whether the bucket is kept: false when the store, full,
// gave it no room (see the package doc). The shard's lock must be held,
// and the shard must not hold key.
func (s *Store) insert(sh *shard, key []byte, dom string, st algorithms.State, now int64) bool {
	size := BucketBytes(len(key))
	// The new bucket is counted from here on, so that makeRoom sees the
	// bounds and its domain's share as they would be with it.
	d := s.acquire(sh, dom)
	d.bytes.Add(size)
	s.buckets.Add(1)
	s.bytes.Add(size)
	if !s.makeRoom(sh, now, d) {
		s.uncount(d, size)
		s.evictions.Add(1)
		return false
	}
	var p uint32
	if n := len(sh.free); n > 0 {
		p, sh.free = sh.free[n-1], sh.free[:n-1]
		sh.slots[p] = slot{st, d}
	} else {
		p = uint32(len(sh.slots))
		sh.slots = append(sh.slots, slot{st, d})
	}
	sh.index[string(key)] = p
	return true
}

// acquire counts one more bucket of the domain named dom and returns its
// entry, made (and its DomainBytes counted) if the domain held none. The
// shard remembers the last domain it counted a bucket for, so that a run
// of insertions of one domain looks it up once. The shard's lock must be
// held.
func (s *Store) acquire(sh *shard, dom string) *domain {
	if d := sh.last; d != nil && d.name == dom && s.hold(d) {
		return d
	}
	for {
		v, ok := s.domains.Load(dom)
		if !ok {
			fresh := &domain{name: strings.Clone(dom)}
			fresh.bytes.Store(DomainBytes(len(dom)))
			if v, ok = s.domains.LoadOrStore(fresh.name, fresh); !ok {
				s.bytes.Add(DomainBytes(len(dom)))
			}
		}
		d := v.(*domain)
		if s.hold(d) {
			sh.last = d
			return d
		}
		// d was retired after the Load: it is gone from the map, or about
		// to be.
		s.domains.CompareAndDelete(dom, d)
	}
}

// hold counts one more bucket of d and reports true, or reports false when
// d is retired.
func (s *Store) hold(d *domain) bool {
	for n := d.buckets.Load(); n >= 0; n = d.buckets.Load() {
		if d.buckets.CompareAndSwap(n, n+1) {
			if n == 0 {
				s.active.Add(1)
			}
			return true
		}
	}
	return false
}

// uncount takes a bucket of size bytes of domain d off the counts, and
// retires d when it was its last.
func (s *Store) uncount(d *domain, size int64) {
	s.buckets.Add(-1)
	s.bytes.Add(-size)
	d.bytes.Add(-size)
	if d.buckets.Add(-1) != 0 {
		return
	}
	s.active.Add(-1)
	if d.buckets.CompareAndSwap(0, -1) { // else acquired again meanwhile
		s.domains.CompareAndDelete(d.name, d)
		s.bytes.Add(-DomainBytes(len(d.name)))
	}
}

// remove deletes a bucket. The shard's lock must be held.
func (s *Store) remove(sh *shard, key string, p uint32) {
	d := sh.slots[p].owner
	delete(sh.index, key)
	sh.slots[p] = slot{}
	sh.free = append(sh.free, p)
	s.uncount(d, BucketBytes(len(key)))
}

// over reports whether the buckets held pass a bound.
func (s *Store) over() bool {
	return s.buckets.Load() > s.maxBuckets || s.bytes.Load() > s.maxBytes
}

// fairShare is a domain's fair share of the bounds: each bound divided by
// the number of domains holding buckets.
type fairShare struct{ buckets, bytes int64 }

func (s *Store) fairShare() fairShare {
	a := max(s.active.Load(), 1)
	return fairShare{s.maxBuckets / a, s.maxBytes / a}
}

// heldOverBy reports whether domain d holds more than f of either bound.
func (f fairShare) heldOverBy(d *domain) bool {
	return d.buckets.Load() > f.buckets || d.bytes.Load() > f.bytes
}

// makeRoom runs before a bucket of domain d is inserted into sh, with the
// new bucket already counted: it reclaims buckets at rest among a few of
// the shard's others and, while the store is over a bound, evicts sampled
// buckets of domains over their fair share, d's own first, nearest rest
// first. It reports whether the new bucket is to be kept (see the package
// doc). The shard's lock must be held.
func (s *Store) makeRoom(sh *shard, now int64, d *domain) bool {
	sample := insertReclaim
	if s.over() {
		sample = evictSample
	}
	type candidate struct {
		key    string
		pos    uint32
		restAt int64
		owner  *domain
	}
	var buf [evictSample]candidate
	busy := buf[:0]
	seen := 0
	for k, p := range sh.index {
		if sl := &sh.slots[p]; sl.state.AtRest(now) {
			s.remove(sh, k, p)
		} else {
			busy = append(busy, candidate{k, p, sl.state.RestAt(), sl.owner})
		}
		if seen++; seen >= sample {
			break
		}
	}
	if !s.over() {
		return true
	}
	slices.SortFunc(busy, func(a, b candidate) int { return cmp.Compare(a.restAt, b.restAt) })
	share := s.fairShare()
	for _, own := range [2]bool{true, false} { // d's own buckets first
		for _, c := range busy {
			if (c.owner == d) == own && share.heldOverBy(c.owner) {
				s.remove(sh, c.key, c.pos)
				s.evictions.Add(1)
				if !s.over() {
					return true
				}
				share = s.fairShare() // c may have been its domain's last
			}
		}
	}
	return seen < evictSample && !share.heldOverBy(d)
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
			if sh.slots[p].state.AtRest(now) {
				s.remove(sh, k, p)
			}
		}
		if n := len(sh.index); len(sh.slots) > 64 && n < len(sh.slots)/4 {
			index := make(map[string]uint32, n)
			slots := make([]slot, 0, n)
			for k, p := range sh.index {
				index[k] = uint32(len(slots))
				slots = append(slots, sh.slots[p])
			}
			sh.index, sh.slots, sh.free = index, slots, nil
		}
		sh.mu.Unlock()
	}
}

// Run calls Sweep every interval until ctx is done: the one goroutine that
// reclaims idle buckets for the whole store. When the bytes held have
// fallen 32 MiB below their peak since Run last did so, it hands the
// memory freed back to the operating system at once
// (runtime/debug.FreeOSMemory, a garbage collection), rather than leaving
// the Go runtime to return it over minutes.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	peak := s.Bytes()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			peak = max(peak, s.Bytes())
			s.Sweep()
			if now := s.Bytes(); peak-now >= releaseBytes {
				debug.FreeOSMemory()
				peak = now
			}
		}
	}
}

// Len returns the number of buckets held.
func (s *Store) Len() int { return int(s.buckets.Load()) }

// Bytes returns the bytes of bucket state held, as BucketBytes accounts
// them.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// MaxBuckets returns the bound on the number of buckets held.
func (s *Store) MaxBuckets() int { return int(s.maxBuckets) }

// MaxBytes returns the bound on the bytes of bucket state held.
func (s *Store) MaxBytes() int64 { return s.maxBytes }

// Evictions returns how many buckets not yet at rest were evicted to keep
// the store within its bounds, new buckets not kept included.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }
