// Package daemontest runs a real ratelimitd in the test's process, on
// loopback, with a fake decision clock: the one harness the tests of the
// daemon, its APIs and the client packages share.
package daemontest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
)

// T0 is the daemon's starting time: a whole minute since the epoch, so
// windows of a minute or less start at T0.
var T0 = time.Unix(1_700_000_040, 0)

// Daemon is a running daemon, its decision clock and its logs.
type Daemon struct {
	*daemon.Daemon
	// Clock is the daemon's clock, reading T0 at start unless the
	// configuration gave another.
	Clock *clock.Fake
	logs  *logtest.Buffer
	once  sync.Once
}

// Start runs a daemon serving policy (a YAML policy file's text; "" for the
// embedded default) until the test ends. opts adjust the configuration
// after the defaults of StartConfig are set.
func Start(t testing.TB, policy string, opts ...func(*daemon.Config)) *Daemon {
	t.Helper()
	var cfg daemon.Config
	if policy != "" {
		cfg.ConfigPath = filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(cfg.ConfigPath, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	return StartConfig(t, cfg)
}

// Path makes a daemon serve the policy file or directory at p.
func Path(p string) func(*daemon.Config) {
	return func(c *daemon.Config) { c.ConfigPath = p }
}

// StartConfig runs a daemon with cfg until the test ends, filling what cfg
// leaves unset: loopback addresses on free ports, a fake clock at T0, a
// logger into Logs, and a 5s shutdown grace.
func StartConfig(t testing.TB, cfg daemon.Config) *Daemon {
	t.Helper()
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	if cfg.AuthzPolicy != "" && cfg.AdminAddr == "" {
		cfg.AdminAddr = "127.0.0.1:0" // the daemon refuses to serve its admin surface beside authorized APIs
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	td := &Daemon{logs: &logtest.Buffer{}}
	if cfg.Clock == nil {
		td.Clock = clock.NewFake(T0.UnixNano())
		cfg.Clock = td.Clock
	} else if f, ok := cfg.Clock.(*clock.Fake); ok {
		td.Clock = f
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(td.logs, nil))
	}
	d, err := daemon.Start(cfg)
	if err != nil {
		t.Fatalf("starting the daemon: %v", err)
	}
	td.Daemon = d
	t.Cleanup(td.Stop)
	return td
}

// Dial returns a plaintext connection to the daemon's gRPC port, closed
// when the test ends.
func (d *Daemon) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Get fetches path from the daemon and returns the status code and the
// body: the probes (/healthz…, /readyz) from its HTTP port, anything else
// from its admin address (the HTTP port without one).
func (d *Daemon) Get(t testing.TB, path string) (int, string) {
	t.Helper()
	addr := d.AdminAddr()
	if strings.HasPrefix(path, "/healthz") || path == "/readyz" {
		addr = d.HTTPAddr()
	}
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// Logs returns what the daemon has logged so far (empty when the
// configuration gave its own logger).
func (d *Daemon) Logs() string { return d.logs.String() }

// Stop shuts the daemon down; it is idempotent.
func (d *Daemon) Stop() {
	d.once.Do(func() { d.Shutdown(context.Background()) })
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
