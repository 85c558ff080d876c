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
// Counting is split over stripes by the descriptor's hash, each with its own
// lock and Capacity places, so a descriptor is always counted in one stripe
// and concurrent callers rarely wait for one another. Time is divided into
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

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/config"
	"github.com/ratelimitd/ratelimitd/internal/engine"
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

const stripes = 8

// Tracker counts denied descriptors. Its zero value is not usable; call New.
type Tracker struct {
	capacity int
	values   Values
	seed     maphash.Seed
	stripes  [stripes]stripe
	gen      atomic.Uint64 // bumped by Rotate
}

// stripe is one lock's share: a Space-Saving sketch for the current
// generation and the previous generation's entries, frozen.
type stripe struct {
	mu       sync.Mutex
	gen      uint64 // the Tracker generation cur counts
	cur      sketch
	prev     sketch
	rendered []byte // scratch for rendering a new entry's text
	_        [64]byte
}

// New returns a Tracker that counts at most capacity descriptors per stripe
// and generation (capacity ≥ 1; a report lists at most capacity), keeping
// values as v says.
func New(capacity int, v Values) *Tracker {
	if capacity < 1 {
		capacity = 1
	}
	t := &Tracker{capacity: capacity, values: v, seed: maphash.MakeSeed()}
	for i := range t.stripes {
		t.stripes[i].cur.init(capacity)
		t.stripes[i].prev.init(capacity)
		t.stripes[i].rendered = make([]byte, 0, MaxTextBytes+8)
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

func (t *Tracker) add(domain string, d *engine.Descriptor, rule *config.Rule, shadow bool) {
	sum := t.hash(domain, d, rule, shadow)
	s := &t.stripes[sum%stripes]
	s.mu.Lock()
	if g := t.gen.Load(); s.gen != g {
		s.rotate(g)
	}
	if !s.cur.increment(sum) {
		s.rendered = t.render(s.rendered[:0], domain, d)
		s.cur.replaceMin(sum, s.rendered, shadow)
	}
	s.mu.Unlock()
}

// hash identifies a descriptor: its domain, keys and (unless Hidden)
// values, in order, and whether the denial was a shadow one. Each part is
// hashed with the Tracker's random seed and folded in by position, so two
// descriptors collide only by chance (about 2^-64 a pair); a collision
// would count two descriptors as one.
//
// A descriptor a policy rule matched is named by the rule's StatKey, which
// holds the domain and every key along the rule's path, and by its values:
// a descriptor matches a rule only entry by entry down that path, so that
// pair names it exactly, with fewer parts to hash. Other descriptors (an
// inline limit's) are named by the domain and every key and value.
func (t *Tracker) hash(domain string, d *engine.Descriptor, rule *config.Rule, shadow bool) uint64 {
	var h uint64
	if rule != nil {
		h = fold(0x9e3779b97f4a7c15, maphash.String(t.seed, rule.StatKey))
	} else {
		h = fold(0x7f4a7c159e3779b9, maphash.String(t.seed, domain))
		for _, e := range d.Entries {
			h = fold(h, maphash.String(t.seed, e.Key))
		}
	}
	if t.values != Hidden {
		for _, e := range d.Entries {
			h = fold(h, maphash.String(t.seed, e.Value))
		}
	}
	if shadow {
		h = fold(h, 1)
	}
	return h
}

// fold mixes x into h so that order matters (a multiply and a rotation
// per part, as in many streaming hashes).
func fold(h, x uint64) uint64 {
	h ^= x
	h *= 0xff51afd7ed558ccd
	return h<<31 | h>>33
}

// Rotate starts a new generation: what was counted until now becomes the
// previous generation, and the one before it is forgotten. Call it once
// per period (the daemon does, every minute).
func (t *Tracker) Rotate() { t.gen.Add(1) }

// rotate brings the stripe to generation g: the current sketch becomes the
// previous one when g is the next generation; both are cleared when more
// than one generation passed without a denial here.
func (s *stripe) rotate(g uint64) {
	s.prev, s.cur = s.cur, s.prev
	if g != s.gen+1 {
		s.prev.reset()
	}
	s.cur.reset()
	s.gen = g
}

func (t *Tracker) render(b []byte, domain string, d *engine.Descriptor) []byte {
	b = appendCut(b, domain)
	b = appendCut(b, ":")
	for i, e := range d.Entries {
		if i > 0 {
			b = appendCut(b, ",")
		}
		b = appendCut(b, " ")
		b = appendCut(b, e.Key)
		switch t.values {
		case Plain:
			b = appendCut(b, "=")
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
			b = append(b, hx[:12]...)
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
		if s.gen != g {
			s.rotate(g)
		}
		all = mergeInto(all, &s.cur, &s.prev)
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
			if j, ok := at[e.hash]; ok {
				out[j].Denials += e.count
				out[j].Error += e.err
				continue
			}
			at[e.hash] = len(out)
			out = append(out, Entry{Descriptor: string(e.text[:e.textLen]), Denials: e.count, Error: e.err, Shadow: e.shadow})
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
