package topdenied

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// TestSketchAgainstModel drives one sketch with random hashes (few enough
// table homes that probe runs collide and wrap, and table tags shared by
// several hashes) and checks it against a plain model after every step: the same
// hashes counted, each findable, the least counted one replaced, the heap
// ordered by the counts it last saw, none above the true count.
func TestSketchAgainstModel(t *testing.T) {
	const capacity = 23 // a 4-ary heap with two full levels and a part
	var s sketch
	s.init(capacity)
	model := map[uint64]uint64{}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 50_000 {
		// Eight tags, in two homes; eight hashes share each tag.
		x := uint64(rng.IntN(64))
		h := x/8*uint64(len(s.table)/2)<<slotBits | x%8
		if s.increment(h) {
			model[h]++
		} else {
			if _, ok := model[h]; ok {
				t.Fatalf("step %d: %d is counted but increment did not find it", step, h)
			}
			var least uint64
			full := len(model) == capacity
			if full {
				least = ^uint64(0)
				for _, c := range model {
					least = min(least, c)
				}
			}
			e := s.replaceMin(h, false)
			if full {
				gone := 0
				for mh, c := range model {
					if _, ok := s.find(mh); !ok {
						if c != least {
							t.Fatalf("step %d: replaced %d counted %d; the least count is %d", step, mh, c, least)
						}
						delete(model, mh)
						gone++
					}
				}
				if gone != 1 {
					t.Fatalf("step %d: %d descriptors gone; want 1", step, gone)
				}
			}
			model[h] = least + 1
			if e.count() != least+1 || e.err != least || e.hash.Load() != h {
				t.Fatalf("step %d: new slot: hash %d count %d err %d; want %d, %d, %d", step, e.hash.Load(), e.count(), e.err, h, least+1, least)
			}
		}
		if s.n != len(model) {
			t.Fatalf("step %d: %d slots in use; model has %d", step, s.n, len(model))
		}
		for mh, c := range model {
			i, ok := s.find(mh)
			if !ok || s.slots[s.table[i].Load()&slotMask-1].count() != c {
				t.Fatalf("step %d: hash %d: found=%v; model count %d", step, mh, ok, c)
			}
		}
		for i := range s.n {
			if c := s.slots[s.heap[i]].count(); s.seen[i] > c {
				t.Fatalf("step %d: heap key %d above the count %d", step, s.seen[i], c)
			}
			if i > 0 && s.seen[(i-1)/arity] > s.seen[i] {
				t.Fatalf("step %d: heap out of order at %d", step, i)
			}
		}
	}
}

// TestConcurrentGuarantees floods a small tracker from several goroutines
// at once (run with -race), so that lock-free increments race with
// replacements, and checks the Space-Saving promises on every place of
// every stripe afterwards: the counts add up to the denials, no count is
// below its descriptor's true count nor above it by more than its Error,
// and every descriptor denied more than total/capacity times is counted.
func TestConcurrentGuarantees(t *testing.T) {
	const capacity, goroutines, each = 4, 4, 100_000
	tr := New(capacity, Plain)
	truths := make([]map[string]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		truths[g] = map[string]uint64{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			for range each {
				var name string
				switch r := rng.IntN(100); {
				case r < 40:
					name = fmt.Sprintf("heavy-%d", r%4)
				default:
					name = fmt.Sprintf("u%d", rng.IntN(200))
				}
				truths[g]["default: user="+name]++
				tr.Observe(deniedOne(name))
			}
		}()
	}
	wg.Wait()
	truth := map[string]uint64{}
	for _, m := range truths {
		for d, n := range m {
			truth[d] += n
		}
	}
	var sum uint64
	counted := map[string]bool{}
	for i := range tr.stripes {
		sk := &tr.stripes[i].sketches[tr.gen.Load()&1]
		for j := range sk.n {
			e := &sk.slots[sk.heap[j]]
			d, c := string(e.text[:e.textLen]), e.count()
			sum += c
			counted[d] = true
			if tc := truth[d]; c < tc || c-e.err > tc {
				t.Errorf("%s: count %d, error %d; true count %d is not in [count-error, count]", d, c, e.err, tc)
			}
		}
	}
	if sum != goroutines*each {
		t.Errorf("counts add up to %d; want the %d denials", sum, goroutines*each)
	}
	for d, n := range truth {
		if n > goroutines*each/capacity && !counted[d] {
			t.Errorf("%s was denied %d > %d times but is not counted", d, n, goroutines*each/capacity)
		}
	}
}

// TestConcurrentRotate counts from several goroutines while the tracker
// rotates once (run with -race): every denial is counted in one of the two
// generations, none lost or counted twice.
func TestConcurrentRotate(t *testing.T) {
	const goroutines, each = 4, 20_000
	tr := New(64, Plain)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tr.Observe(deniedOne(fmt.Sprintf("u%d", (g+i)%10)))
				if g == 0 && i == each/2 {
					tr.Rotate()
				}
			}
		}()
	}
	wg.Wait()
	var sum uint64
	for _, e := range tr.Top(0) {
		sum += e.Denials
	}
	if sum != goroutines*each {
		t.Errorf("denials counted over both generations = %d; want %d", sum, goroutines*each)
	}
	if tr.gen.Load() != 1 {
		t.Fatalf("generation %d; want 1", tr.gen.Load())
	}
}

var oneKey = &config.Rule{StatKey: "default.user"}

func deniedOne(name string) (*engine.Request, *engine.Response) {
	return &engine.Request{Domain: "default", Descriptors: []engine.Descriptor{{Entries: []config.Entry{{Key: "user", Value: name}}}}},
		&engine.Response{Code: algorithms.Denied, Statuses: []engine.Status{{Code: algorithms.Denied, Matched: true, Rule: oneKey}}}
}

// TestRenderStaysInItsSlot: a descriptor's text, however long and in any
// mode, fits the slot's array (render never outgrows it).
func TestRenderStaysInItsSlot(t *testing.T) {
	long := strings.Repeat("v", 300)
	entries := make([]config.Entry, 16)
	for i := range entries {
		entries[i] = config.Entry{Key: fmt.Sprintf("key%d", i), Value: long}
	}
	for _, v := range []Values{Plain, Hashed, Hidden} {
		tr := New(1, v)
		var e slot
		for _, d := range []string{"d", strings.Repeat("D", 256)} {
			b := tr.render(e.text[:0], d, &engine.Descriptor{Entries: entries})
			if len(b) > len(e.text) || &b[0] != &e.text[0] {
				t.Errorf("%s: render made %d bytes outside the slot's %d", v, len(b), len(e.text))
			}
		}
	}
}

// TestRuleCache asks for the hashes of more rules than the cache has
// places, from several goroutines at once (run with -race): each answer is
// the hash of the rule's own domain and keys, cached or not.
func TestRuleCache(t *testing.T) {
	tr := New(1, Plain)
	const n = 4 * ruleCacheSize
	rules := make([]*config.Rule, n)
	descs := make([]*engine.Descriptor, n)
	want := make([]uint64, n)
	for i := range rules {
		rules[i] = &config.Rule{StatKey: fmt.Sprintf("d.k%d", i)}
		descs[i] = &engine.Descriptor{Entries: []config.Entry{{Key: fmt.Sprintf("k%d", i), Value: "v"}}}
		want[i] = tr.key.part(tr.key.part(1, "d"), descs[i].Entries[0].Key)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 6))
			for range 20_000 {
				i := rng.IntN(n)
				if i >= n/2 {
					i = rng.IntN(8) // a few rules more often, so that hits happen
				}
				if got := tr.ruleHash("d", descs[i], rules[i]); got != want[i] {
					t.Errorf("rule %d: hash %x; want %x", i, got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestIncrementVerifiesItsSlot plays the states a lock-free increment can
// meet while a writer replaces a slot: a table entry left for a
// descriptor whose slot holds another one by now, and a slot claimed busy.
// Neither may be counted.
func TestIncrementVerifiesItsSlot(t *testing.T) {
	var s sketch
	s.init(4)
	const h1, h2 = 0x1111_0000_0000_0000, 0x2222_0000_0001_0000 // homes 0 and 1
	e := s.replaceMin(h1, false)
	s.table[s.home(h2)].Store(entry(h2, 0)) // h2's old entry, now slot 0 is h1's
	if s.increment(h2) || e.count() != 1 {
		t.Errorf("a stale entry counted: increment(h2) counted on h1's slot (count %d)", e.count())
	}
	e.state.Store(e.state.Load() | busy)
	if s.increment(h1) || e.count() != 1 {
		t.Errorf("a busy slot counted (count %d)", e.count())
	}
	e.state.Store(e.state.Load() &^ busy)
	if !s.increment(h1) || e.count() != 2 {
		t.Errorf("h1 not counted on its own slot (count %d)", e.count())
	}
}
