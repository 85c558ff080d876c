package daemon_test

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// statePolicy has a token bucket per user (2 at once, then one every
// 30s), a sliding window per API key (3 per 10s) and, for the changed-limit
// test, a fixed window per tenant.
const statePolicy = `
domain: shop
descriptors:
  - key: user
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 2, burst: 2}
  - key: api_key
    rate_limit: {algorithm: sliding_window, unit: second, unit_multiplier: 10, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// stateDaemon starts a daemon keeping its buckets in stateFile, with a fake
// clock that reads the real wall time at start: so the decision clock and
// the wall clock agree, as they do in a real process.
func stateDaemon(t *testing.T, policy, stateFile string, opts ...func(*daemon.Config)) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, policy, append([]func(*daemon.Config){func(c *daemon.Config) {
		c.StateFile = stateFile
		c.Clock = clock.NewFake(time.Now().UnixNano())
	}}, opts...)...)
}

func shouldRateLimit(t *testing.T, d *daemontest.Daemon, ds ...*rl.Descriptor) *rl.ShouldRateLimitResponse {
	t.Helper()
	resp, err := rl.NewRateLimitServiceClient(d.Dial(t)).ShouldRateLimit(context.Background(), req("shop", ds...))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// drainAll charges each descriptor until it is denied.
func drainAll(t *testing.T, d *daemontest.Daemon, ds ...*rl.Descriptor) {
	t.Helper()
	for _, ds := range ds {
		for i := 0; shouldRateLimit(t, d, ds).OverallCode == rl.Code_CODE_OK; i++ {
			if i > 100 {
				t.Fatalf("%v never denied", ds)
			}
		}
	}
}

// TestStateFileKeepsBucketsAcrossARestart: a user and an API key drained
// before a graceful stop are still denied by the next daemon, which loaded
// the snapshot before it served, and the retry_after it gives comes true.
func TestStateFileKeepsBucketsAcrossARestart(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "buckets.snap")
	user, key := desc("user", "alice"), desc("api_key", "k1")

	first := stateDaemon(t, statePolicy, stateFile)
	drainAll(t, first, user, key)
	first.Clock.Set(time.Now().UnixNano()) // in step with the wall clock when it writes, as a real clock
	first.Stop()
	if !strings.Contains(first.Logs(), `msg="snapshot written" state_file=`+stateFile+" buckets=2") {
		t.Fatalf("no final snapshot of 2 buckets logged:\n%s", first.Logs())
	}

	second := stateDaemon(t, statePolicy, stateFile)
	logs := second.Logs()
	loaded, serving := strings.Index(logs, `msg="snapshot loaded"`), strings.Index(logs, `msg="ratelimitd serving"`)
	if loaded < 0 || serving < 0 || loaded > serving {
		t.Fatalf("the snapshot was not loaded before serving:\n%s", logs)
	}
	if !strings.Contains(logs, "restored=2 at_rest=0 dropped=0 full=0") {
		t.Errorf("load log line does not say 2 restored:\n%s", logs)
	}
	if code, body := second.Get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after start: %d %s", code, body)
	}
	// Both still denied; then, in the order their waits end, each is
	// denied 1ns before its retry_after and admitted at it.
	start := second.Clock.Now()
	type denial struct {
		ds *rl.Descriptor
		at int64
	}
	var denials []denial
	for _, ds := range []*rl.Descriptor{user, key} {
		resp := shouldRateLimit(t, second, ds)
		if resp.OverallCode != rl.Code_CODE_OVER_LIMIT {
			t.Fatalf("%v after the restart: %v, want still over the limit", ds.Entries[0].Key, resp)
		}
		wait := resp.RetryAfter.AsDuration()
		if wait <= 0 || wait > 30*time.Second {
			t.Fatalf("%v: retry_after %v", ds.Entries[0].Key, wait)
		}
		denials = append(denials, denial{ds, start + int64(wait)})
	}
	slices.SortFunc(denials, func(a, b denial) int { return cmp.Compare(a.at, b.at) })
	for _, d := range denials {
		second.Clock.Set(d.at - 1)
		if r := shouldRateLimit(t, second, d.ds); r.OverallCode != rl.Code_CODE_OVER_LIMIT {
			t.Fatalf("%v admitted 1ns before its retry_after", d.ds.Entries[0].Key)
		}
		second.Clock.Set(d.at)
		if r := shouldRateLimit(t, second, d.ds); r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("%v denied at its retry_after: %v", d.ds.Entries[0].Key, r)
		}
	}
	m := scrape(t, second)
	for series, want := range map[string]float64{
		`ratelimitd_snapshot_loads_total{outcome="loaded"}`:     1,
		`ratelimitd_snapshot_loads_total{outcome="corrupt"}`:    0,
		`ratelimitd_snapshot_load_buckets{result="restored"}`:   2,
		`ratelimitd_snapshot_load_buckets{result="dropped"}`:    0,
		`ratelimitd_snapshot_writes_total{result="ok"}`:         0,
		`ratelimitd_snapshot_last_write_buckets`:                0,
		`ratelimitd_snapshot_load_buckets{result="at_rest"}`:    0,
		`ratelimitd_snapshot_loads_total{outcome="missing"}`:    0,
		`ratelimitd_snapshot_writes_total{result="error"}`:      0,
		`ratelimitd_snapshot_load_buckets{result="full"}`:       0,
		`ratelimitd_snapshot_loads_total{outcome="unreadable"}`: 0,
		`ratelimitd_snapshot_loads_total{outcome="truncated"}`:  0,
		`ratelimitd_snapshot_loads_total{outcome="foreign"}`:    0,
		`ratelimitd_snapshot_loads_total{outcome="version"}`:    0,
		`ratelimitd_snapshot_last_write_timestamp_seconds`:      0,
		`ratelimitd_snapshot_last_write_bytes`:                  0,
		`ratelimitd_snapshot_last_write_pause_seconds`:          0,
		`ratelimitd_snapshot_last_write_duration_seconds`:       0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
}

// TestStateFileRestoresOnlyLimitsStillInForce: a limit whose requests
// changed while the daemon was down keeps what was used; one whose period
// changed starts afresh.
func TestStateFileRestoresOnlyLimitsStillInForce(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "buckets.snap")
	user, tenant := desc("user", "bob"), desc("tenant", "t1")
	first := stateDaemon(t, statePolicy, stateFile)
	drainAll(t, first, user, tenant)
	first.Stop()

	changed := strings.Replace(statePolicy, "{unit: hour, requests_per_unit: 1}", "{unit: hour, requests_per_unit: 2}", 1)
	changed = strings.Replace(changed, "unit: minute, requests_per_unit: 2, burst: 2", "unit: hour, requests_per_unit: 2, burst: 2", 1)
	second := stateDaemon(t, changed, stateFile)
	if !strings.Contains(second.Logs(), "restored=1 at_rest=0 dropped=1") {
		t.Errorf("load log line does not say 1 restored, 1 dropped:\n%s", second.Logs())
	}
	if r := shouldRateLimit(t, second, user); r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Remaining != 1 {
		t.Errorf("changed period: %v, want a fresh bucket (1 remaining of 2)", r)
	}
	if r := shouldRateLimit(t, second, tenant); r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Remaining != 0 {
		t.Errorf("raised limit: %v, want the one used kept (0 remaining of 2)", r)
	}
	if r := shouldRateLimit(t, second, tenant); r.OverallCode != rl.Code_CODE_OVER_LIMIT {
		t.Errorf("raised limit, spent: %v, want over the limit", r)
	}
}

// TestStateFileRefusedFiles: a bad state file is refused with a log line
// naming why and a metric, kept aside as .rejected, and the daemon starts
// and serves with no buckets; its next snapshot is good again.
func TestStateFileRefusedFiles(t *testing.T) {
	good := func(t *testing.T) []byte {
		stateFile := filepath.Join(t.TempDir(), "good.snap")
		d := stateDaemon(t, statePolicy, stateFile)
		drainAll(t, d, desc("user", "carol"))
		d.Stop()
		b, err := os.ReadFile(stateFile)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}(t)
	flipped := bytes.Clone(good)
	flipped[40] ^= 0x10
	version := bytes.Clone(good)
	version[8] = 9
	for _, tc := range []struct {
		name, reason string
		data         []byte
	}{
		{"foreign", "foreign", []byte("user=carol denied\n")},
		{"truncated", "truncated", good[:len(good)-10]},
		{"empty", "truncated", nil},
		{"corrupt", "corrupt", flipped},
		{"later version", "version", version},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateFile := filepath.Join(t.TempDir(), "buckets.snap")
			if err := os.WriteFile(stateFile, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			d := stateDaemon(t, statePolicy, stateFile)
			if !strings.Contains(d.Logs(), `msg="snapshot refused; starting with no buckets" state_file=`+stateFile+" reason="+tc.reason) {
				t.Errorf("no refusal logged with reason %s:\n%s", tc.reason, d.Logs())
			}
			if got := scrape(t, d)[`ratelimitd_snapshot_loads_total{outcome="`+tc.reason+`"}`]; got != 1 {
				t.Errorf("loads_total{outcome=%q} = %v, want 1", tc.reason, got)
			}
			aside, err := os.ReadFile(stateFile + ".rejected")
			if err != nil || !bytes.Equal(aside, tc.data) {
				t.Errorf("the bad file was not kept aside as it was: %v", err)
			}
			if r := shouldRateLimit(t, d, desc("user", "carol")); r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Remaining != 1 {
				t.Errorf("after a refused file: %v, want a fresh bucket", r)
			}
			d.Stop()
			third := stateDaemon(t, statePolicy, stateFile)
			if !strings.Contains(third.Logs(), "restored=1") {
				t.Errorf("the snapshot written after a refused file did not load:\n%s", third.Logs())
			}
		})
	}
}

func TestStateFileMissingStartsEmpty(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "new.snap")
	d := stateDaemon(t, statePolicy, stateFile)
	if !strings.Contains(d.Logs(), `msg="no snapshot yet; starting with no buckets"`) {
		t.Errorf("no log line for a first start:\n%s", d.Logs())
	}
	if got := scrape(t, d)[`ratelimitd_snapshot_loads_total{outcome="missing"}`]; got != 1 {
		t.Errorf(`loads_total{outcome="missing"} = %v, want 1`, got)
	}
}

// TestStateFileWrittenEveryInterval: with no shutdown at all, the buckets
// reach the file within an interval, and the write metrics say so.
func TestStateFileWrittenEveryInterval(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "buckets.snap")
	d := stateDaemon(t, statePolicy, stateFile, func(c *daemon.Config) { c.SnapshotInterval = 20 * time.Millisecond })
	drainAll(t, d, desc("user", "dave"), desc("api_key", "k2"))
	wait.For(t, "a snapshot of both buckets", func() bool {
		m := scrape(t, d)
		return m[`ratelimitd_snapshot_last_write_buckets`] == 2 && m[`ratelimitd_snapshot_writes_total{result="ok"}`] >= 1
	})
	m := scrape(t, d)
	if m[`ratelimitd_snapshot_last_write_bytes`] <= 0 || m[`ratelimitd_snapshot_last_write_timestamp_seconds`] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("write metrics: %v", m)
	}
	if m[`ratelimitd_snapshot_writes_total{result="error"}`] != 0 {
		t.Error("a snapshot failed")
	}
}

func TestStateFileNeedsTheMemoryStore(t *testing.T) {
	_, err := daemon.Start(daemon.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: "redis", StateFile: filepath.Join(t.TempDir(), "s"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil || !strings.Contains(err.Error(), "state file") {
		t.Fatalf("Start with Redis and a state file: %v, want an error about the state file", err)
	}
}

// TestFailedStartKeepsTheStateFile: a start that fails after the store is
// opened (the HTTP address is taken) writes nothing over a good file.
func TestFailedStartKeepsTheStateFile(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "buckets.snap")
	d := stateDaemon(t, statePolicy, stateFile)
	drainAll(t, d, desc("user", "erin"))
	d.Stop()
	before, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	taken := stateDaemon(t, statePolicy, filepath.Join(t.TempDir(), "other.snap"))
	_, err = daemon.Start(daemon.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: taken.HTTPAddr(), StateFile: stateFile,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil {
		t.Fatal("Start on a taken HTTP address succeeded")
	}
	after, _ := os.ReadFile(stateFile)
	if !bytes.Equal(before, after) {
		t.Error("a failed start rewrote the state file")
	}
}

// TestStateFileKeepsLongKeys: a bucket whose key the store keeps as a
// digest (a long descriptor value) comes back too: the file carries the
// digests' seed.
func TestStateFileKeepsLongKeys(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "buckets.snap")
	user := desc("user", strings.Repeat("a-long-user-id-", 10))
	first := stateDaemon(t, statePolicy, stateFile)
	drainAll(t, first, user)
	first.Clock.Set(time.Now().UnixNano())
	first.Stop()

	second := stateDaemon(t, statePolicy, stateFile)
	if !strings.Contains(second.Logs(), "restored=1 ") {
		t.Fatalf("the long key's bucket was not restored:\n%s", second.Logs())
	}
	if r := shouldRateLimit(t, second, user); r.OverallCode != rl.Code_CODE_OVER_LIMIT {
		t.Errorf("long key after the restart: %v, want still over the limit", r)
	}
	other := stateDaemon(t, statePolicy, filepath.Join(t.TempDir(), "other.snap"))
	if r := shouldRateLimit(t, other, user); r.OverallCode != rl.Code_CODE_OK {
		t.Errorf("a daemon without the file: %v, want a fresh bucket", r)
	}
}

// TestNotReadyWhileRestoring: while the state file loads, the HTTP port
// already answers, /readyz with 503 and decision calls with 503
// (Unavailable), so that nothing is decided on a store without its
// buckets; once it is loaded the daemon is ready. The state file is a
// named pipe, which holds the load until the test writes to it.
func TestNotReadyWhileRestoring(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := l.Addr().String()
	l.Close()

	stateFile := filepath.Join(t.TempDir(), "state")
	if err := syscall.Mkfifo(stateFile, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := daemon.Config{
		ConfigPath: "", GRPCAddr: "127.0.0.1:0", HTTPAddr: httpAddr,
		StateFile: stateFile,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	started := make(chan *daemon.Daemon, 1)
	go func() {
		d, err := daemon.Start(cfg)
		if err != nil {
			t.Error(err)
		}
		started <- d
	}()
	// Opening the pipe for writing returns once the daemon has opened it
	// to read: the load has started, and waits for what the test writes.
	pipe, err := os.OpenFile(stateFile, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	get := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+httpAddr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	decide := `{"domain":"default","descriptors":[{"entries":[{"key":"path","value":"/orders"}]}]}`
	if code, body := get("GET", "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while restoring: %d %s; want 503", code, body)
	}
	if code, body := get("POST", "/ratelimit.v1.RateLimitService/ShouldRateLimit", decide); code != http.StatusServiceUnavailable || !strings.Contains(body, "loading its state file") {
		t.Errorf("a decision while restoring: %d %s; want 503 saying the state file is loading", code, body)
	}
	pipe.Close() // an empty state file: refused, and the store starts empty
	d := <-started
	if d == nil {
		t.FailNow()
	}
	defer d.Shutdown(context.Background())
	if code, body := get("GET", "/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz once restored: %d %s; want 200", code, body)
	}
	if code, body := get("POST", "/ratelimit.v1.RateLimitService/ShouldRateLimit", decide); code != http.StatusOK {
		t.Errorf("a decision once restored: %d %s; want 200", code, body)
	}
}

// TestStateFileOneDaemon: a second daemon on a state file in use fails to
// start, naming the file and the holder, and leaves the file alone; once
// the first stops, a daemon starts on it again (a failed start released
// the lock too).
func TestStateFileOneDaemon(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "buckets.snap")
	first := stateDaemon(t, statePolicy, stateFile)
	drainAll(t, first, desc("user", "frank"))
	_, err := daemon.Start(daemon.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", StateFile: stateFile,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil {
		t.Fatal("a second daemon started on a state file in use")
	}
	for _, want := range []string{"--state-file", "in use by another process", stateFile, "pid " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second Start: %q does not say %q", err, want)
		}
	}
	first.Clock.Set(time.Now().UnixNano())
	first.Stop()
	second := stateDaemon(t, statePolicy, stateFile)
	if code := shouldRateLimit(t, second, desc("user", "frank")).OverallCode; code != rl.Code_CODE_OVER_LIMIT {
		t.Errorf("after the first daemon stopped, the second restored frank as %v, want OVER_LIMIT", code)
	}
}

// TestStateFileDirectoryProblems: a state file whose directory is missing
// or not writable is refused naming the flag, the file and the directory,
// not blamed on another daemon.
func TestStateFileDirectoryProblems(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir", "buckets.snap")
	for _, tc := range []struct {
		name, stateFile string
		want            []string
	}{
		{"missing directory", missing, []string{"--state-file " + missing, "the directory " + filepath.Dir(missing) + " does not exist"}},
		// sysfs refuses new files even to root, as an unwritable volume does.
		{"unwritable directory", "/sys/buckets.snap", []string{"--state-file /sys/buckets.snap", "the directory /sys is not writable by this process"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := daemon.Start(daemon.Config{
				GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", StateFile: tc.stateFile,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err == nil {
				t.Fatal("started")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "state file of its own") {
				t.Errorf("%q blames another daemon", err)
			}
		})
	}
}

// TestStateFileKeepsSharedBuckets: a share_threshold rule's bucket, which
// every value of its wildcard charges, drained before a graceful stop is
// still drained after it (its key has an odd number of parts; the restore
// once dropped it as a key the engine could not have made).
func TestStateFileKeepsSharedBuckets(t *testing.T) {
	const policy = `
domain: shop
descriptors:
  - key: path
    value: /uploads/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`
	stateFile := filepath.Join(t.TempDir(), "buckets.snap")
	first := stateDaemon(t, policy, stateFile)
	drainAll(t, first, desc("path", "/uploads/a.png"))
	first.Clock.Set(time.Now().UnixNano())
	first.Stop()

	second := stateDaemon(t, policy, stateFile)
	if !strings.Contains(second.Logs(), "restored=1 at_rest=0 dropped=0") {
		t.Errorf("load log line does not say the shared bucket was restored:\n%s", second.Logs())
	}
	if r := shouldRateLimit(t, second, desc("path", "/uploads/b.png")); r.OverallCode != rl.Code_CODE_OVER_LIMIT {
		t.Fatalf("another value of the shared wildcard after the restart: %v, want over the limit", r.OverallCode)
	}
}

// TestStateFileThatIsADirectory: a state path naming a directory is
// refused at start, naming the flag, rather than failing every snapshot.
func TestStateFileThatIsADirectory(t *testing.T) {
	dir := t.TempDir()
	d, err := daemon.Start(daemon.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", StateFile: dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil {
		d.Shutdown(context.Background())
		t.Fatal("a daemon started with a directory as its --state-file")
	}
	if !strings.Contains(err.Error(), "--state-file") || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("error %q does not say that --state-file is a directory", err)
	}
}
