// Package topdenied answers "who is being limited?": it keeps the
// descriptors (domain and entries) that were denied most often lately, in
// fixed memory, with no per-value metric series.
//
// A Tracker is an engine observer (engine.WithObserver). For every denied
// descriptor of a decided request — over limit or over capacity, shadow
// rules' would-be denials included and marked — it counts one denial in a
// Space-Saving sketch (Metwally, Agrawal and El Abbadi, 2005): at most
// Capacity descriptors are counted at a time; a descriptor not among them
// takes the place of the one counted least, inheriting that count as its
// possible overcount (Entry.Error). Every descriptor denied more than
// 1/Capacity of all denials in the window is guaranteed to be listed, and a
// listed count is never below the true one nor above it by more than Error.
//
// Counting is split over stripes by the descriptor's hash, each with
// Capacity places, so a descriptor is always counted in one stripe (the
// guarantee above holds per stripe: for the denials counted there).
// Descriptors are told apart by a hash of their domain, keys and values
// keyed with a secret drawn per Tracker, so values an attacker chooses
// cannot be made to count as another descriptor or crowd one stripe.
//
// A denial of a descriptor already counted takes no lock: a table lookup
// and one atomic compare-and-swap of its count — about 16 ns with the
// hash (BenchmarkObserve, one core of a 2-core AMD EPYC VM). A descriptor
// not yet counted takes its stripe's lock to be placed, its text rendered
// and the least counted one replaced — about 100 ns, the cost of each
// denial in a flood of distinct descriptors. Concurrent callers lose no
// denial and count none twice. Time is divided into
// generations (Rotate): Top reports the current generation and the
// previous one together, so a report covers the last one to two
// generations. Nothing is allocated per observation.
//
// Values usually come from end users and can be personal data: a Tracker
// may keep them as they are (Plain), as a short keyed hash (Hashed) that
// tells values apart without revealing them, or not at all (Hidden). The
// choice applies when a descriptor is recorded, so a hidden or hashed
// value is never held.
package topdenied

import (
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// Values says how a Tracker keeps descriptor values.
type Values int

const (
	// Plain keeps values as they are (cut at MaxTextBytes).
	Plain Values = iota
	// Hashed keeps a 12-hex-digit keyed hash of each value: equal values
	// show equal hashes; the key is random per process.
	Hashed
	// Hidden keeps no value: descriptors that differ only in values are
	// counted as one.
	Hidden
)

// String returns "plain", "hash" or "hide".
func (v Values) String() string {
	switch v {
	case Hashed:
		return "hash"
	case Hidden:
		return "hide"
	}
	return "plain"
}

// Set parses "plain", "hash" or "hide" (for flag.Var).
func (v *Values) Set(s string) error {
	switch s {
	case "plain":
		*v = Plain
	case "hash":
		*v = Hashed
	case "hide":
		*v = Hidden
	default:
		return fmt.Errorf("%q: want plain, hash or hide", s)
	}
	return nil
}

// MaxTextBytes is the longest descriptor text kept (with "…"); a longer
// one keeps its beginning and the last 60 bytes of its last value, with
// "…" between them. Counting is by the whole descriptor, not the text.
const MaxTextBytes = 240

// stripes is how many stripes a Tracker has (a power of two); a
// descriptor's stripe is the top stripeBits bits of its hash.
const (
	stripeBits = 3
	stripes    = 1 << stripeBits
)

// Tracker counts denied descriptors. Its zero value is not usable; call New.
type Tracker struct {
	capacity int
	values   Values
	key      hashKey       // names descriptors (hash)
	seed     maphash.Seed  // hashes values shown as Hashed
	gen      atomic.Uint64 // bumped by Rotate
	rules    ruleCache
	_        [64]byte
	stripes  [stripes]stripe
}

// stripe is one lock's share: a Space-Saving sketch for the current
// generation and the previous generation's, frozen but for increments
// under way when it was frozen.
type stripe struct {
	mu       sync.Mutex
	gen      atomic.Uint64 // the Tracker generation sketches[gen&1] counts; written under mu
	sketches [2]sketch     // sketches[gen&1] is the current one, the other the previous
	_        [64]byte
}

// New returns a Tracker that counts at most capacity descriptors per stripe
// and generation (1 ≤ capacity ≤ 16384, clamped; a report lists at most
// capacity), keeping values as v says.
func New(capacity int, v Values) *Tracker {
	capacity = min(max(capacity, 1), maxCapacity)
	t := &Tracker{capacity: capacity, values: v, key: newHashKey(), seed: maphash.MakeSeed()}
	for i := range t.stripes {
		t.stripes[i].sketches[0].init(capacity)
		t.stripes[i].sketches[1].init(capacity)
	}
	return t
}

// Observe counts the denied descriptors of a decided request; it has the
// shape of an engine.Observer's first two arguments.
func (t *Tracker) Observe(req *engine.Request, resp *engine.Response) {
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Code == algorithms.Allowed || !st.Matched || i >= len(req.Descriptors) {
			continue
		}
		t.add(req.Domain, &req.Descriptors[i], st.Rule, st.Shadow || resp.Shadowed)
	}
}

// add counts one denial of a descriptor: without a lock when it is
// counted already in the current generation, else under its stripe's.
func (t *Tracker) add(domain string, d *engine.Descriptor, rule *config.Rule, shadow bool) {
	sum := t.hash(domain, d, rule, shadow)
	s := &t.stripes[sum>>(64-stripeBits)]
	if g := t.gen.Load(); s.gen.Load() == g && s.sketches[g&1].increment(sum) {
		return
	}
	s.mu.Lock()
	if g := t.gen.Load(); s.gen.Load() != g {
		s.rotate(g)
	}
	sk := &s.sketches[s.gen.Load()&1]
	if !sk.increment(sum) {
		e := sk.replaceMin(sum, shadow)
		e.textLen = uint8(copy(e.text[:], t.render(e.text[:0], domain, d)))
	}
	s.mu.Unlock()
}

// hash identifies a descriptor: its domain, keys and (unless Hidden)
// values, and whether the denial was a shadow one. It is keyed with the
// Tracker's secret (hashKey), so two descriptors collide only by chance
// — about 2^-64 a pair for values chosen without knowing the key, as an
// attacker's are; a collision would count two descriptors as one.
func (t *Tracker) hash(domain string, d *engine.Descriptor, rule *config.Rule, shadow bool) uint64 {
	k := &t.key
	var h uint64
	if rule != nil {
		// The domain and keys, the rule's own (ruleCache), then the
		// values.
		h = t.ruleHash(domain, d, rule)
		if t.values != Hidden {
			for _, e := range d.Entries {
				h = k.part(h, e.Value)
			}
		}
	} else {
		h = k.part(2, domain)
		for _, e := range d.Entries {
			h = k.part(h, e.Key)
			if t.values != Hidden {
				h = k.part(h, e.Value)
			}
		}
	}
	if shadow {
		h = k.word(h, 1)
	}
	return h
}

// Rotate starts a new generation: what was counted until now becomes the
// previous generation, and the one before it is forgotten. Call it once
// per period (the daemon does, every minute).
func (t *Tracker) Rotate() { t.gen.Add(1) }

// rotate brings the stripe to generation g: the current sketch becomes the
// previous one when g is the next generation; both are cleared when more
// than one generation passed without a denial here. The lock is held.
func (s *stripe) rotate(g uint64) {
	s.sketches[g&1].reset()
	if g != s.gen.Load()+1 {
		s.sketches[(g+1)&1].reset()
	}
	s.gen.Store(g)
}

func (t *Tracker) render(b []byte, domain string, d *engine.Descriptor) []byte {
	b = appendCut(b, domain)
	b = appendByte(b, ':')
	for i, e := range d.Entries {
		if i > 0 {
			b = appendByte(b, ',')
		}
		b = appendByte(b, ' ')
		b = appendCut(b, e.Key)
		switch t.values {
		case Plain:
			b = appendByte(b, '=')
			b = appendCut(b, e.Value)
		case Hashed:
			v := maphash.String(t.seed, e.Value)
			var x [8]byte
			for j := range x {
				x[j] = byte(v >> (8 * j))
			}
			var hx [16]byte
			hex.Encode(hx[:], x[:])
			b = appendCut(b, "=#")
			b = appendCut(b, string(hx[:12]))
		}
	}
	if len(b) > MaxTextBytes {
		// Keep the end of the last value too: entries go from the most
		// general to the most specific, so what tells two long
		// descriptors apart is usually at the very end.
		tail := ""
		if t.values == Plain && len(d.Entries) > 0 {
			v := d.Entries[len(d.Entries)-1].Value
			tail = v[len(v)-min(len(v), tailBytes):]
		}
		b = append(append(b[:MaxTextBytes-len(tail)], "…"...), tail...)
	}
	return b
}

// tailBytes is how much of the end of a cut descriptor's last value its
// text keeps.
const tailBytes = 60

// appendByte appends c to b unless b holds MaxTextBytes+1 bytes already.
func appendByte(b []byte, c byte) []byte {
	if len(b) > MaxTextBytes {
		return b
	}
	return append(b, c)
}

// appendCut appends s to b, but never more than MaxTextBytes+1 bytes in
// all (render cuts the text at MaxTextBytes afterwards).
func appendCut(b []byte, s string) []byte {
	if room := MaxTextBytes + 1 - len(b); len(s) > room {
		s = s[:max(room, 0)]
	}
	return append(b, s...)
}

// Entry is one descriptor of a report.
type Entry struct {
	// Descriptor is "domain: key=value, key=value", values as the
	// Tracker keeps them.
	Descriptor string `json:"descriptor"`
	// Denials is how often it was denied in the report's window, counted
	// at most Error too high.
	Denials uint64 `json:"denials"`
	// Error bounds the overcount: the true count is in [Denials-Error,
	// Denials].
	Error uint64 `json:"error"`
	// Shadow: the denials were a shadow rule's (or global shadow mode's):
	// the requests were let through.
	Shadow bool `json:"shadow,omitempty"`
}

// Top returns at most n descriptors (n ≤ 0: the Tracker's capacity),
// most denied first, counted over the current and the previous
// generation.
func (t *Tracker) Top(n int) []Entry {
	if n <= 0 || n > t.capacity {
		n = t.capacity
	}
	g := t.gen.Load()
	var all []Entry
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		if s.gen.Load() != g {
			s.rotate(g)
		}
		all = mergeInto(all, &s.sketches[g&1], &s.sketches[(g+1)&1])
		s.mu.Unlock()
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Denials != all[j].Denials {
			return all[i].Denials > all[j].Denials
		}
		return all[i].Descriptor < all[j].Descriptor
	})
	if len(all) > n {
		all = all[:n]
	}
	return all
}

// mergeInto appends the entries of a stripe's two generations to out,
// summing a descriptor's counts across them.
func mergeInto(out []Entry, cur, prev *sketch) []Entry {
	at := make(map[uint64]int)
	for _, sk := range []*sketch{cur, prev} {
		for i := 0; i < sk.n; i++ {
			e := &sk.slots[sk.heap[i]]
			h, count := e.hash.Load(), e.count()
			if j, ok := at[h]; ok {
				out[j].Denials += count
				out[j].Error += e.err
				continue
			}
			at[h] = len(out)
			out = append(out, Entry{Descriptor: string(e.text[:e.textLen]), Denials: count, Error: e.err, Shadow: e.shadow})
		}
	}
	return out
}

// Text renders entries as aligned plain text, one per line: denials, the
// overcount bound, and the descriptor — for curl and terminals.
func Text(entries []Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%10s %8s  %s\n", "DENIALS", "±", "DESCRIPTOR")
	for _, e := range entries {
		shadow := ""
		if e.Shadow {
			shadow = "  (shadow)"
		}
		fmt.Fprintf(&b, "%10d %8d  %s%s\n", e.Denials, e.Error, e.Descriptor, shadow)
	}
	return b.String()
}
