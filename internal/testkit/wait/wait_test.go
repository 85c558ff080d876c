package wait

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestForReturnsOnceTheConditionHolds: For keeps calling cond until it
// returns true, then returns without failing the test.
func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	For(t, "the fifth call", func() bool {
		calls++
		return calls == 5
	})
	if calls != 5 {
		t.Errorf("cond called %d times, want 5 (For returns on the first true)", calls)
	}
}

// TestForSeesAnotherGoroutinesChange: a condition made true by another
// goroutine after a while is seen.
func TestForSeesAnotherGoroutinesChange(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(50*time.Millisecond, func() { done.Store(true) })
	For(t, "the timer", done.Load)
}

// fatalT records a failure and ends the calling goroutine, as
// testing.T's Fatalf does.
type fatalT struct {
	testing.TB
	failure string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestGivesUpNamingWhatItAwaited: a condition that never holds fails the
// test once the deadline has passed, with a message naming what was
// awaited and how long; cond was called until then.
func TestGivesUpNamingWhatItAwaited(t *testing.T) {
	f := &fatalT{TB: t}
	calls := 0
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		within(f, 100*time.Millisecond, "the moon", func() bool { calls++; return false })
		t.Error("within returned although cond never held")
	}()
	<-done
	if want := "gave up after 100ms waiting for the moon"; f.failure != want {
		t.Errorf("failure %q, want %q", f.failure, want)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("gave up after %v, before the deadline", waited)
	}
	if calls < 5 {
		t.Errorf("cond called %d times in 100ms, want it polled (pauses of at most 20ms)", calls)
	}
}
