// Package daemontest runs a real ratelimitd in the test's process, on
// loopback, with a fake decision clock, for the client packages' tests.
package daemontest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
)

// T0 is the daemon's starting time: a whole minute since the epoch, so
// windows of a minute or less start at T0.
var T0 = time.Unix(1_700_000_040, 0)

// Daemon is a running daemon and its decision clock.
type Daemon struct {
	*daemon.Daemon
	// Clock is the daemon's clock, reading T0 at start.
	Clock   *clock.Fake
	stopped bool
}

// Start runs a daemon serving policy (a YAML policy file's text; "" for the
// embedded default) until the test ends.
func Start(t testing.TB, policy string) *Daemon {
	t.Helper()
	cfg := daemon.Config{
		GRPCAddr:      "127.0.0.1:0",
		HTTPAddr:      "127.0.0.1:0",
		ShutdownGrace: 5 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if policy != "" {
		cfg.ConfigPath = filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(cfg.ConfigPath, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	clk := clock.NewFake(T0.UnixNano())
	cfg.Clock = clk
	d, err := daemon.Start(cfg)
	if err != nil {
		t.Fatalf("starting the daemon: %v", err)
	}
	td := &Daemon{Daemon: d, Clock: clk}
	t.Cleanup(td.Stop)
	return td
}

// Stop shuts the daemon down; it is idempotent.
func (d *Daemon) Stop() {
	if d.stopped {
		return
	}
	d.stopped = true
	d.Shutdown(context.Background())
}

// SmallTiers is the default policy's three tiers with a small user tier
// (2 at once, then one every 120ms: 500 a minute), and a queue: 10 a
// second through a queue of 3, so admitted requests leave 100ms apart.
const SmallTiers = `
domain: default
descriptors:
  - key: generic_key
    value: global
    rate_limit: {name: global, algorithm: token_bucket, unit: minute, requests_per_unit: 6000, burst: 7000}
  - key: path
    rate_limit: {name: per-endpoint, algorithm: token_bucket, unit: minute, requests_per_unit: 3000, burst: 4000}
    descriptors:
      - key: user
        rate_limit: {name: per-user-per-endpoint, algorithm: token_bucket, unit: minute, requests_per_unit: 500, burst: 2}
  - key: queue
    rate_limit: {name: smooth, algorithm: leaky_bucket_queue, unit: second, requests_per_unit: 10, burst: 3}
  - key: export
    rate_limit: {name: exports, algorithm: token_bucket, unit: hour, requests_per_unit: 2}
`
