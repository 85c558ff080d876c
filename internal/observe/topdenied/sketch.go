package topdenied

import "sync/atomic"

// sketch is one Space-Saving summary of at most len(slots) descriptors,
// identified by their 64-bit hashes. An open-addressing table finds a
// descriptor's slot by hash, and a min-heap of slots finds the least
// counted one. After init it allocates nothing.
//
// A descriptor already counted is counted again without the stripe's lock
// (increment): a lookup in the table and one compare-and-swap on its
// slot's state. Everything else — placing a descriptor, the heap,
// forgetting — happens under the lock, so there is one writer at a time,
// and lock-free increments run alongside it. For them:
//
//   - the table's entries are single words, each stored atomically;
//     a lookup that runs into an entry being moved may miss a descriptor
//     that is there, and then the caller takes the lock and looks again;
//   - a slot's state word holds its count, a version bumped each time the
//     slot takes another descriptor, and a busy bit, set while it does:
//     an increment verifies the slot's hash between reading the state and
//     swapping it, so it lands on the slot only while the slot holds that
//     descriptor, or fails and tries again. (An increment stalled
//     between its read and its swap would succeed wrongly only if the
//     slot came back to the same state: 2^15 replacements later, with the
//     same count — but a replacement takes the least count plus one, and
//     the least count grows as replacements go round.);
//   - the heap is ordered by each slot's count as last seen under the lock
//     (seen), never above its count: increments do not reorder it.
//     The minimum is found lazily (claimMin): while the top's count has
//     grown since it was seen, it is sifted down with its new count. A top
//     whose count is as seen is the least counted slot.
type sketch struct {
	slots []slot
	heap  []int32  // slot indexes, a min-heap by seen; heap[:n] in use
	seen  []uint64 // seen[i] is the count heap[i] is ordered by
	pos   []int32  // pos[slot] is the slot's index in heap
	n     int
	table []atomic.Uint32 // tag<<16 | slot+1 (see entry); len a power of two ≥ 3·len(slots)
}

type slot struct {
	hash   atomic.Uint64
	state  atomic.Uint64 // version<<versionShift | busy | count
	err    uint64        // the count inherited on taking the slot
	shadow bool
	// textLen bytes of text are the descriptor as shown.
	textLen uint8
	text    [MaxTextBytes + len("…")]byte
}

// A slot's state: a count in the low 48 bits (a generation of one stripe
// would need 2^48 denials to overflow it), a busy bit, and a version.
const (
	countMask    = 1<<48 - 1
	busy         = 1 << 48
	versionShift = 49
)

// A table entry is 16 bits of a descriptor's hash (its tag: bits 16 to
// 31) over its slot index + 1; 0 is an empty entry. A hash's home in the
// table is its tag's low bits, so that moving an entry needs no slot, and
// entries of one probe run mostly differ in their tags: a lookup reads a
// slot (and its full hash) only for a matching tag.
const (
	slotBits = 16
	slotMask = 1<<slotBits - 1
	// maxCapacity is the most slots a sketch can have: its table, at
	// least three times larger, is at most 1<<slotBits entries long.
	maxCapacity = 1 << (slotBits - 2)
)

func tag(h uint64) uint32 { return uint32(h>>slotBits) & slotMask }

func entry(h uint64, sl int32) uint32 { return tag(h)<<slotBits | uint32(sl+1) }

// home is where hash h's probe run starts.
func (s *sketch) home(h uint64) int { return int(tag(h)) & (len(s.table) - 1) }

// entryHome is where the probe run of entry e's hash starts.
func (s *sketch) entryHome(e uint32) int { return int(e>>slotBits) & (len(s.table) - 1) }

func (s *sketch) init(capacity int) {
	s.slots = make([]slot, capacity)
	s.heap = make([]int32, capacity)
	s.seen = make([]uint64, capacity)
	s.pos = make([]int32, capacity)
	size := 1
	for size < 3*capacity {
		size *= 2
	}
	s.table = make([]atomic.Uint32, size)
}

// reset forgets every descriptor. An increment under way may still land
// on a slot (it is counted in a generation being forgotten); the slot's
// next descriptor starts from its own count all the same.
func (s *sketch) reset() {
	s.n = 0
	for i := range s.table {
		s.table[i].Store(0)
	}
}

// increment counts one more denial of the descriptor with hash h and
// reports whether it was counted; false when h was not found, which,
// without the lock, may happen while a writer moves table entries. It
// takes no lock: with the lock held it never misses.
func (s *sketch) increment(h uint64) bool {
	mask := len(s.table) - 1
	t := tag(h)
	for i, probes := s.home(h), 0; probes < len(s.table); i, probes = (i+1)&mask, probes+1 {
		e := s.table[i].Load()
		if e == 0 {
			return false
		}
		if e>>slotBits != t {
			continue
		}
		sl := &s.slots[e&slotMask-1]
		for {
			st := sl.state.Load()
			if st&busy != 0 || sl.hash.Load() != h {
				break // another descriptor's slot, or becoming one
			}
			if sl.state.CompareAndSwap(st, st+1) {
				return true
			}
		}
	}
	return false
}

// replaceMin counts the descriptor with hash h, not yet counted, in a free
// slot with count 1 or in place of the least counted descriptor, whose
// count it inherits plus one (that count is its possible overcount). It
// returns the slot, whose text the caller fills in. The lock is held.
func (s *sketch) replaceMin(h uint64, shadow bool) *slot {
	var sl int32
	var inherited uint64
	if s.n < len(s.slots) {
		sl = int32(s.n)
		s.heap[s.n] = sl
		s.pos[sl] = int32(s.n)
		s.n++
		e := &s.slots[sl]
		for {
			st := e.state.Load() // a free slot: only increments from a forgotten generation
			if e.state.CompareAndSwap(st, st|busy) {
				break
			}
		}
	} else {
		sl, inherited = s.claimMin()
		s.remove(s.slots[sl].hash.Load())
	}
	e := &s.slots[sl]
	e.hash.Store(h)
	e.err, e.shadow = inherited, shadow
	s.seen[s.pos[sl]] = inherited + 1
	version := e.state.Load()>>versionShift + 1
	e.state.Store(version<<versionShift | (inherited + 1))
	s.insert(h, sl)
	if inherited > 0 {
		s.down(int(s.pos[sl]))
	} else {
		s.up(int(s.pos[sl]))
	}
	return e
}

// claimMin finds the least counted slot and marks it busy, so that no
// increment lands on it any more, and returns it with its count — the
// least count at the instant it was marked. The heap is full.
func (s *sketch) claimMin() (int32, uint64) {
	for {
		sl := s.heap[0]
		e := &s.slots[sl]
		st := e.state.Load()
		if c := st & countMask; c != s.seen[0] {
			s.seen[0] = c // counted since last seen: order it anew
			s.down(0)
			continue
		}
		if e.state.CompareAndSwap(st, st|busy) {
			return sl, st & countMask
		}
	}
}

// count is a slot's count now.
func (e *slot) count() uint64 { return e.state.Load() & countMask }

// The heap is 4-ary: fewer levels to sift a new descriptor through
// than a binary heap's, and a node's children are side by side in seen.
const arity = 4

// down restores the heap below index i after its seen count grew,
// moving the entry down to its place in one write.
func (s *sketch) down(i int) {
	sl, key := s.heap[i], s.seen[i]
	for {
		first := arity*i + 1
		if first >= s.n {
			break
		}
		// The least child; without branches where all four are there,
		// for in a flood of new descriptors which child is least is a
		// coin toss that a branch would mispredict half the time.
		m, least := first, s.seen[first]
		if first+arity <= s.n {
			c := s.seen[first : first+arity : first+arity]
			m, least = lesser(m, least, first+1, c[1])
			m, least = lesser(m, least, first+2, c[2])
			m, least = lesser(m, least, first+3, c[3])
		} else {
			for c := first + 1; c < s.n; c++ {
				if s.seen[c] < least {
					m, least = c, s.seen[c]
				}
			}
		}
		if key <= least {
			break
		}
		s.heap[i], s.seen[i] = s.heap[m], s.seen[m]
		s.pos[s.heap[i]] = int32(i)
		i = m
	}
	s.heap[i], s.seen[i] = sl, key
	s.pos[sl] = int32(i)
}

// lesser returns (j, y) when y < x, else (i, x), without a branch; x
// and y are counts, below 2^63.
func lesser(i int, x uint64, j int, y uint64) (int, uint64) {
	mask := -((y - x) >> 63) // all ones when y < x
	return i ^ (i^j)&int(mask), x ^ (x^y)&mask
}

// up restores the heap above index i for a new entry.
func (s *sketch) up(i int) {
	sl, key := s.heap[i], s.seen[i]
	for i > 0 {
		p := (i - 1) / arity
		if s.seen[p] <= key {
			break
		}
		s.heap[i], s.seen[i] = s.heap[p], s.seen[p]
		s.pos[s.heap[i]] = int32(i)
		i = p
	}
	s.heap[i], s.seen[i] = sl, key
	s.pos[sl] = int32(i)
}

// find returns h's table index, or the empty one where it would go. The
// lock is held.
func (s *sketch) find(h uint64) (int, bool) {
	mask := len(s.table) - 1
	for i := s.home(h); ; i = (i + 1) & mask {
		e := s.table[i].Load()
		switch {
		case e == 0:
			return i, false
		case e>>slotBits == tag(h) && s.slots[e&slotMask-1].hash.Load() == h:
			return i, true
		}
	}
}

func (s *sketch) insert(h uint64, sl int32) {
	i, _ := s.find(h)
	s.table[i].Store(entry(h, sl))
}

// remove deletes h from the table, shifting later entries of its probe
// run back so that no lookup stops early (no tombstones). An entry is
// stored at its new place before its old one is overwritten.
func (s *sketch) remove(h uint64) {
	i, ok := s.find(h)
	if !ok {
		return
	}
	mask := len(s.table) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		e := s.table[j].Load()
		if e == 0 {
			break
		}
		home := s.entryHome(e)
		// Move j back to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.table[i].Store(e)
			i = j
		}
	}
	s.table[i].Store(0)
}
