package topdenied

import (
	"math/rand/v2"
	"testing"
)

// TestSketchAgainstModel drives one sketch with random hashes (few enough
// table homes that probe runs collide and wrap) and checks it against a
// plain model after every step: the same hashes counted, each findable,
// the heap ordered and the minimum replaced.
func TestSketchAgainstModel(t *testing.T) {
	const capacity = 8
	var s sketch
	s.init(capacity)
	model := map[uint64]uint64{}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 20_000 {
		h := uint64(rng.IntN(40)) * uint64(len(s.table)/2) // many hashes share a home
		if s.increment(h) {
			model[h]++
		} else {
			if _, ok := model[h]; ok {
				t.Fatalf("step %d: %d is counted but increment did not find it", step, h)
			}
			var minH, minC uint64
			if len(model) == capacity {
				minC = ^uint64(0)
				for mh, c := range model {
					if c < minC || (c == minC && mh < minH) {
						minH, minC = mh, c
					}
				}
				minC = s.slots[s.heap[0]].count
				minH = s.slots[s.heap[0]].hash
				if model[minH] != minC {
					t.Fatalf("step %d: heap minimum %d has count %d; model says %d", step, minH, minC, model[minH])
				}
				for _, c := range model {
					if c < minC {
						t.Fatalf("step %d: heap minimum %d is not the least count (%d)", step, minC, c)
					}
				}
				delete(model, minH)
			}
			s.replaceMin(h, nil, false)
			model[h] = minC + 1
		}
		if s.n != len(model) {
			t.Fatalf("step %d: %d slots in use; model has %d", step, s.n, len(model))
		}
		for mh, c := range model {
			i, ok := s.find(mh)
			if !ok || s.slots[s.table[i].slot-1].count != c {
				t.Fatalf("step %d: hash %d: found=%v; model count %d", step, mh, ok, c)
			}
		}
		for i := 1; i < s.n; i++ {
			if s.slots[s.heap[(i-1)/2]].count > s.slots[s.heap[i]].count {
				t.Fatalf("step %d: heap out of order at %d", step, i)
			}
		}
	}
}
