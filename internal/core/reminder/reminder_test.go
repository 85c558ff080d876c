package reminder_test

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/reminder"
)

// TestReminder: a condition seen every second for three minutes is logged
// as it starts and then once a minute, each reminder counting the times it
// was seen since the last line; over, it is logged once with how long it
// lasted; seen again, it starts afresh.
func TestReminder(t *testing.T) {
	c := clock.NewFake(0)
	r := reminder.New(c, time.Minute)
	if log, _ := r.Stop(); log {
		t.Fatal("Stop before any Start: log")
	}
	if log, since, n := r.Start(); !log || since != 0 || n != 1 {
		t.Fatalf("first Start = %v, %v, %d; want true, 0, 1", log, since, n)
	}
	type line struct {
		at    time.Duration
		since time.Duration
		n     int
	}
	var lines []line
	for i := 1; i <= 180; i++ {
		c.Advance(time.Second)
		if log, since, n := r.Start(); log {
			lines = append(lines, line{time.Duration(i) * time.Second, since, n})
		}
	}
	want := []line{{time.Minute, time.Minute, 60}, {2 * time.Minute, 2 * time.Minute, 60}, {3 * time.Minute, 3 * time.Minute, 60}}
	if len(lines) != len(want) {
		t.Fatalf("reminders %v, want %v", lines, want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("reminder %d = %+v, want %+v", i, lines[i], want[i])
		}
	}
	c.Advance(500 * time.Millisecond)
	if log, since := r.Stop(); !log || since != 3*time.Minute+500*time.Millisecond {
		t.Errorf("Stop = %v, %v; want true, 3m0.5s", log, since)
	}
	if log, _ := r.Stop(); log {
		t.Error("second Stop: log, want nothing (it was over)")
	}
	if log, since, n := r.Start(); !log || since != 0 || n != 1 {
		t.Errorf("Start after Stop = %v, %v, %d; want it to start afresh", log, since, n)
	}
}

// TestDefaultInterval: a non-positive interval is DefaultInterval.
func TestDefaultInterval(t *testing.T) {
	c := clock.NewFake(0)
	r := reminder.New(c, 0)
	r.Start()
	c.Advance(reminder.DefaultInterval - 1)
	if log, _, _ := r.Start(); log {
		t.Error("reminded before DefaultInterval")
	}
	c.Advance(1)
	if log, _, _ := r.Start(); !log {
		t.Error("not reminded at DefaultInterval")
	}
}
