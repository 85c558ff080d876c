package topdenied

// sketch is one Space-Saving summary of at most len(slots) descriptors,
// identified by their 64-bit hashes. A min-heap of slots by count finds
// the least-counted descriptor in O(1) and keeps order in O(log k); an
// open-addressing table finds a descriptor's slot by hash. After init it
// allocates nothing.
type sketch struct {
	slots []slot
	heap  []int32 // slot indexes, a min-heap by count; heap[:n] in use
	pos   []int32 // pos[slot] is the slot's index in heap
	n     int
	table []tableEntry // open addressing, linear probing; len a power of two ≥ 2·len(slots)
}

type slot struct {
	hash    uint64
	count   uint64
	err     uint64
	shadow  bool
	textLen uint16
	text    [MaxTextBytes + len("…")]byte
}

type tableEntry struct {
	hash uint64
	slot int32 // slot index + 1; 0 for an empty entry
}

func (s *sketch) init(capacity int) {
	s.slots = make([]slot, capacity)
	s.heap = make([]int32, capacity)
	s.pos = make([]int32, capacity)
	size := 1
	for size < 2*capacity {
		size *= 2
	}
	s.table = make([]tableEntry, size)
}

// reset forgets every descriptor.
func (s *sketch) reset() {
	s.n = 0
	clear(s.table)
}

// increment counts one more denial of the descriptor with hash h, and
// reports whether it was counted already; when not, nothing changed and
// the caller must replaceMin.
func (s *sketch) increment(h uint64) bool {
	i, ok := s.find(h)
	if !ok {
		return false
	}
	sl := s.table[i].slot - 1
	s.slots[sl].count++
	s.down(int(s.pos[sl]))
	return true
}

// replaceMin counts the descriptor with hash h, not yet counted, with text
// as its text: in a free slot with count 1, or in place of the least
// counted descriptor, whose count it inherits plus one (that count is its
// possible overcount).
func (s *sketch) replaceMin(h uint64, text []byte, shadow bool) {
	var sl int32
	var inherited uint64
	if s.n < len(s.slots) {
		sl = int32(s.n)
		s.heap[s.n] = sl
		s.pos[sl] = int32(s.n)
		s.n++
	} else {
		sl = s.heap[0]
		inherited = s.slots[sl].count
		s.remove(s.slots[sl].hash)
	}
	e := &s.slots[sl]
	e.hash, e.count, e.err, e.shadow = h, inherited+1, inherited, shadow
	e.textLen = uint16(copy(e.text[:], text))
	s.insert(h, sl)
	if inherited > 0 {
		s.down(int(s.pos[sl]))
	} else {
		s.up(int(s.pos[sl]))
	}
}

// down restores the heap below index i after its count grew.
func (s *sketch) down(i int) {
	for {
		l := 2*i + 1
		if l >= s.n {
			return
		}
		m := l
		if r := l + 1; r < s.n && s.slots[s.heap[r]].count < s.slots[s.heap[l]].count {
			m = r
		}
		if s.slots[s.heap[i]].count <= s.slots[s.heap[m]].count {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// up restores the heap above index i for a new entry.
func (s *sketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.slots[s.heap[p]].count <= s.slots[s.heap[i]].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *sketch) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.pos[s.heap[i]] = int32(i)
	s.pos[s.heap[j]] = int32(j)
}

func (s *sketch) find(h uint64) (int, bool) {
	mask := len(s.table) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch e := s.table[i]; {
		case e.slot == 0:
			return i, false
		case e.hash == h:
			return i, true
		}
	}
}

func (s *sketch) insert(h uint64, sl int32) {
	i, _ := s.find(h)
	s.table[i] = tableEntry{hash: h, slot: sl + 1}
}

// remove deletes h from the table, shifting later entries of its probe
// run back so that no lookup stops early (no tombstones).
func (s *sketch) remove(h uint64) {
	i, ok := s.find(h)
	if !ok {
		return
	}
	mask := len(s.table) - 1
	for j := (i + 1) & mask; s.table[j].slot != 0; j = (j + 1) & mask {
		home := int(s.table[j].hash) & mask
		// Move j back to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.table[i] = s.table[j]
			i = j
		}
	}
	s.table[i] = tableEntry{}
}
