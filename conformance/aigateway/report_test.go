package aigateway

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"testing"
)

// report counts, per test, the decisions played and those that were not the
// promised one; TestMain prints it after the tests.
var report = &tally{counts: map[string]*[2]int{}}

type tally struct {
	mu     sync.Mutex
	counts map[string]*[2]int // test name -> {played, wrong}
}

func (r *tally) add(t *testing.T, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[t.Name()]
	if c == nil {
		c = &[2]int{}
		r.counts[t.Name()] = c
	}
	c[0]++
	if !ok {
		c[1]++
	}
}

func (r *tally) print(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) == 0 {
		return
	}
	names := make([]string, 0, len(r.counts))
	for n := range r.counts {
		names = append(names, n)
	}
	sort.Strings(names)
	played, wrong := 0, 0
	fmt.Fprintln(w, "request-path decisions compared with AI Gateway's promises:")
	for _, n := range names {
		c := r.counts[n]
		played += c[0]
		wrong += c[1]
		fmt.Fprintf(w, "  %-60s %3d played, %3d not as promised\n", n, c[0], c[1])
	}
	fmt.Fprintf(w, "  %-60s %3d played, %3d not as promised\n", "all", played, wrong)
}

// step is one request and the decision AI Gateway's documentation promises
// for it.
type step struct {
	call
	allowed bool
	// promise is the sentence of AI Gateway's documentation that decides
	// the step; why is the arithmetic that makes it this decision.
	promise, why string
}

// play sends each step through Envoy in order and checks each decision
// against the promise; a wrong decision is reported and the next steps are
// played all the same (the wrong decision's consequences included, as a
// user would live them).
func (d *deployment) play(t *testing.T, steps []step) {
	t.Helper()
	for i, s := range steps {
		got := d.envoy.do(s.call)
		report.add(t, got == s.allowed)
		if got != s.allowed {
			t.Errorf("step %d (%v): %s, promised %s (%s)\n\tthe promise: %s\n\tthe check: %s",
				i+1, s.call, verdict(got), verdict(s.allowed), s.why, s.promise, d.envoy.checked)
		}
	}
}

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "429"
}
