package guard

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBreakerStates walks the circuit breaker through its states on a
// timeline of its own: failures in a row open it, a success in between
// starts the count over, the open breaker lets nothing through until the
// cool-off has passed, then exactly one probe at a time; the probe's
// failure opens it again, its success closes it, and a probe whose caller
// went away lets the next request probe instead.
func TestBreakerStates(t *testing.T) {
	type step struct {
		at    time.Duration // since the start
		op    string        // "allow"; "fail", "ok" or "release": the outcome of the last request allowed
		want  bool          // allow: allowed
		probe bool          // allow: is the probe
		state BreakerState  // afterwards
	}
	fail := errors.New("timeout")
	steps := []step{
		{0, "allow", true, false, BreakerClosed},
		{0, "fail", false, false, BreakerClosed},
		{0, "fail", false, false, BreakerClosed},
		{0, "ok", false, false, BreakerClosed}, // the count starts over
		{0, "fail", false, false, BreakerClosed},
		{0, "fail", false, false, BreakerClosed},
		{1, "fail", false, false, BreakerOpen}, // third in a row, at 1ns
		{2, "allow", false, false, BreakerOpen},
		{time.Second, "allow", false, false, BreakerOpen}, // cool-off ends at 1s+1ns
		{time.Second + 1, "allow", true, true, BreakerHalfOpen},
		{time.Second + 1, "allow", false, false, BreakerHalfOpen}, // one probe at a time
		{time.Second + 2, "fail", false, false, BreakerOpen},      // the probe failed: open again
		{2 * time.Second, "allow", false, false, BreakerOpen},
		{2*time.Second + 2, "allow", true, true, BreakerHalfOpen},
		{2*time.Second + 2, "release", false, false, BreakerHalfOpen}, // its caller went away
		{2*time.Second + 3, "allow", true, true, BreakerHalfOpen},     // the next one probes
		{2*time.Second + 4, "ok", false, false, BreakerClosed},
		{2*time.Second + 5, "allow", true, false, BreakerClosed},
	}
	var transitions []string
	b := newBreaker(3, time.Second, func(from, to BreakerState) { transitions = append(transitions, from.String()+">"+to.String()) })
	probe := false
	for i, st := range steps {
		now := int64(st.at)
		switch st.op {
		case "allow":
			ok, p := b.allow(now)
			if ok != st.want || p != st.probe {
				t.Fatalf("step %d: allow = %v, probe %v; want %v, %v", i, ok, p, st.want, st.probe)
			}
			if ok {
				probe = p // the outcome reported next is this request's
			}
		case "fail":
			b.done(probe, fail, 0, now)
			probe = false
		case "ok":
			b.done(probe, nil, 0, now)
			probe = false
		case "release":
			b.release(probe)
			probe = false
		}
		if got := b.State(); got != st.state {
			t.Fatalf("step %d (%s at %v): state %v, want %v", i, st.op, st.at, got, st.state)
		}
	}
	want := "closed>open open>half_open half_open>open open>half_open half_open>closed"
	if got := strings.Join(transitions, " "); got != want {
		t.Errorf("transitions %q, want %q", got, want)
	}
	if b.transitions[BreakerOpen].Load() != 2 || b.transitions[BreakerHalfOpen].Load() != 2 || b.transitions[BreakerClosed].Load() != 1 {
		t.Errorf("transition counts: open %d, half open %d, closed %d; want 2, 2, 1",
			b.transitions[BreakerOpen].Load(), b.transitions[BreakerHalfOpen].Load(), b.transitions[BreakerClosed].Load())
	}
}

// TestBreakerCountsABatchOnce: the requests of one failed batch are one
// failure of the remote, however many there are.
func TestBreakerCountsABatchOnce(t *testing.T) {
	b := newBreaker(3, time.Second, nil)
	fail := errors.New("timeout")
	for range 10 {
		b.done(false, fail, 7, 0) // ten requests of batch 7
	}
	b.done(false, fail, 8, 0)
	if got := b.State(); got != BreakerClosed {
		t.Fatalf("after two failed batches the breaker is %v, want closed", got)
	}
	b.done(false, fail, 0, 0) // a request that failed on its own
	if got := b.State(); got != BreakerOpen {
		t.Fatalf("after a third failure the breaker is %v, want open", got)
	}
}
