// Package wait polls a condition in a test until it holds or a deadline
// passes: for what a test cannot be told of directly (a log line, a
// metric, another process's state), never as a timing assertion.
//
// For calls cond at once, then again after pauses of 1 ms, 2 ms, 4 ms ...
// up to 20 ms, and returns as soon as cond returns true. If cond has not
// returned true Timeout after the call, For fails the test with t.Fatalf
// ("gave up after 30s waiting for " followed by what), so it must be
// called from the test's goroutine. The deadline bounds a hang; it is not
// a measure: a passing test waits only as long as cond takes to hold, so
// Timeout is generous enough for a loaded machine.
//
// cond runs on the caller's goroutine; it may call t.Fatal itself, to
// fail at once on a state that can never turn into the awaited one.
package wait

import (
	"testing"
	"time"
)

// Timeout is how long For polls before it fails the test.
const Timeout = 30 * time.Second

// maxPause is the longest pause between two calls of cond.
const maxPause = 20 * time.Millisecond

// For polls cond until it returns true, and fails t naming what it waited
// for if cond has not returned true within Timeout.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	within(t, Timeout, what, cond)
}

func within(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, maxPause) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", timeout, what)
		}
		time.Sleep(pause)
	}
}
