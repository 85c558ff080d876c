package algorithms_test

import (
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// A token bucket of 10 refilled at 5 per second: a burst of 10 at once,
// then one every 200ms.
func ExampleLimit_Decide() {
	limit, err := algorithms.NewLimit(algorithms.TokenBucket, 5, time.Second, 10)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var s algorithms.State // a new bucket: full
	var d algorithms.Decision

	s, d = limit.Decide(s, now, 10)
	fmt.Println(d.Code, d.Remaining, d.ResetAfter)
	s, d = limit.Decide(s, now, 1)
	fmt.Println(d.Code, d.RetryAfter)
	now += int64(d.RetryAfter)
	s, d = limit.Decide(s, now, 1)
	fmt.Println(d.Code, d.Remaining, d.ResetAfter)
	_, d = limit.Decide(s, now, 11)
	fmt.Println(d.Code)
	// Output:
	// allowed 0 2s
	// denied 200ms
	// allowed 0 2s
	// over_capacity
}

// A leaky bucket as a queue lets requests through to a backend at 2 per
// second, holding up to 3: each admitted request is told how long to wait.
func ExampleLimit_Decide_queue() {
	limit, err := algorithms.NewLimit(algorithms.LeakyBucketQueue, 2, time.Second, 3)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var s algorithms.State
	for range 4 {
		var d algorithms.Decision
		s, d = limit.Decide(s, now, 1)
		fmt.Println(d.Code, "delay", d.Delay, "retry after", d.RetryAfter)
	}
	// Output:
	// allowed delay 0s retry after 0s
	// allowed delay 500ms retry after 0s
	// allowed delay 1s retry after 0s
	// denied delay 0s retry after 500ms
}

// A sliding window of 10 per minute: the 10 spent in the last nanosecond of
// one minute weigh on the next, 1 less every 6 seconds.
func ExampleLimit_Decide_slidingWindow() {
	limit, err := algorithms.NewLimit(algorithms.SlidingWindow, 10, time.Minute, 0)
	if err != nil {
		panic(err)
	}
	minute := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC).UnixNano()
	var s algorithms.State
	var d algorithms.Decision

	s, d = limit.Decide(s, minute-1, 10)
	fmt.Println(d.Code, d.Remaining)
	s, d = limit.Decide(s, minute, 1)
	fmt.Println(d.Code, d.RetryAfter)
	_, d = limit.Decide(s, minute+int64(d.RetryAfter), 1)
	fmt.Println(d.Code, d.Remaining)
	// Output:
	// allowed 0
	// denied 6s
	// allowed 0
}
