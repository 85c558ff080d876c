package redis_test

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// logLines returns the JSON log records written to buf so far.
func logLines(t *testing.T, buf *logtest.Buffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRefusedConnection: with nothing listening on Redis's port, the
// store says the connection is refused — in Healthy and in its log line —
// rather than that a deadline passed, and go-redis's own lines go through
// the store's structured logger (component=go-redis), not to stderr, at
// debug level: go-redis says it on every attempt, and the store's own
// warning says it once.
func TestRefusedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections to addr are now refused

	var buf logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := newTestStore(t, redis.Config{Addr: addr, Timeout: 250 * time.Millisecond, Logger: log}, clock.NewFake(t0))
	l := mustLimit(t, algorithms.FixedWindow, 10, time.Hour, 0)
	apply(t, s, store.Charge{Domain: "shop", Key: engineKey("shop", "refused"), Limit: l, Cost: 1})
	up, why := s.Healthy()
	if up || !strings.Contains(why, "connection refused") || strings.Contains(why, "deadline") {
		t.Errorf("Healthy() = %v, %q; want down, connection refused", up, why)
	}

	var storeLine, clientLine map[string]any
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && (storeLine == nil || clientLine == nil); time.Sleep(20 * time.Millisecond) {
		for _, m := range logLines(t, &buf) {
			switch {
			case strings.HasPrefix(m["msg"].(string), "redis failed"):
				storeLine = m
			case m["component"] == "go-redis":
				clientLine = m
			}
		}
	}
	if storeLine == nil {
		t.Fatal("no log line saying Redis failed")
	}
	if e, _ := storeLine["err"].(string); !strings.Contains(e, "connection refused") || strings.Contains(e, "deadline") {
		t.Errorf("the store logged err=%q; want the refused connection", e)
	}
	if clientLine == nil {
		t.Fatalf("no go-redis line in the structured log; got %v", logLines(t, &buf))
	}
	if msg, _ := clientLine["msg"].(string); !strings.Contains(msg, "refused") || clientLine["level"] != "DEBUG" {
		t.Errorf("go-redis's line: %v; want a debug line naming the refused connection", clientLine)
	}
}

// TestRedisDownWarnsOnce: while Redis stays down for two minutes, the
// breaker opens again after each failed probe (a cool-off of a second),
// but the warnings are one as it goes down — Redis failed, the breaker
// open — and a reminder a minute that counts the failed probes; the half
// open breaker is a debug line. Once Redis is back, one line says so.
func TestRedisDownWarnsOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var buf logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	local := clock.NewFake(t0)
	s := newGuardedStore(t, redis.Config{Addr: addr, Timeout: 250 * time.Millisecond, Logger: log},
		guard.Config{BreakerFailures: 1, BreakerCooloff: time.Second, Clock: local}, nil)
	l := mustLimit(t, algorithms.FixedWindow, 10, time.Hour, 0)
	charge := store.Charge{Domain: "shop", Key: engineKey("shop", "down"), Limit: l, Cost: 1}
	apply(t, s, charge)
	for range 130 { // over two minutes, a probe a second
		local.Advance(time.Second)
		apply(t, s, charge)
	}
	if got := s.Breaker(); got != guard.BreakerOpen {
		t.Fatalf("breaker %v after 130 failed probes, want open", got)
	}
	wait.For(t, "the store's log line \"redis failed\"", func() bool { return strings.Contains(buf.String(), "redis failed") })

	var opened, reminders, failed, other []map[string]any
	for _, m := range logLines(t, &buf) {
		msg := m["msg"].(string)
		switch {
		case strings.HasPrefix(msg, "redis circuit breaker open"):
			opened = append(opened, m)
		case strings.HasPrefix(msg, "redis circuit breaker still open"):
			reminders = append(reminders, m)
		case strings.HasPrefix(msg, "redis failed"):
			failed = append(failed, m)
		default:
			other = append(other, m)
		}
	}
	if len(opened) != 1 || len(failed) != 1 || len(other) != 0 {
		t.Errorf("%d breaker-open, %d redis-failed lines and others %v; want one each and no other at info level", len(opened), len(failed), other)
	}
	if len(reminders) != 2 {
		t.Fatalf("%d reminders over 130s down, want 2 (one a minute): %v", len(reminders), reminders)
	}
	for i, m := range reminders {
		if m["level"] != "WARN" || m["open_for"] != float64((time.Duration(i+1)*time.Minute).Nanoseconds()) || m["probes_failed"] != float64(60) {
			t.Errorf("reminder %d: %v; want a warning, open_for %v, probes_failed 60", i, m, time.Duration(i+1)*time.Minute)
		}
	}
}
