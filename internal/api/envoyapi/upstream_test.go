package envoyapi_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The files of testdata/upstream are in envoyproxy/ratelimit's format and
// use every field its documentation describes (see the README there).

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// ratelimitd builds the real command once per test binary and returns its
// path.
func ratelimitd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			if goTool, err = exec.LookPath("go"); err != nil {
				buildErr = errors.New("no go command to build ratelimitd with")
				return
			}
		}
		dir, err := os.MkdirTemp("", "ratelimitd-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "ratelimitd")
		out, err := exec.Command(goTool, "build", "-o", binary, "github.com/ratelimitd/ratelimitd/cmd/ratelimitd").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

func checkConfig(t *testing.T, path string) (stdout, stderr string, exit int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(ratelimitd(t), "check-config", path)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), exit
}

func TestCheckConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		exit     int
		stdout   string
		inStderr string
	}{
		{"testdata/upstream", 0, `ok: domain "edge" from testdata/upstream/edge.yaml
ok: domain "payments" from testdata/upstream/payments.yaml
ok: domain "rollout" from testdata/upstream/rollout.yaml
`, ""},
		{"testdata/shop.yaml", 0, "ok: domain \"shop\" from testdata/shop.yaml\noverdraft: shop.tokens takes charges in full, into debt if need be\n", ""},
		// The example's policy directory holds policy files only (Envoy's
		// bootstrap is beside it, not in it).
		{"../../../examples/envoy/policy", 0, "ok: domain \"edge\" from ../../../examples/envoy/policy/edge.yaml\n", ""},
		{bad, 1, "", bad + ":4: descriptors[0].rate_limit.unit"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			stdout, stderr, exit := checkConfig(t, tt.path)
			if exit != tt.exit || stdout != tt.stdout || !strings.Contains(stderr, tt.inStderr) {
				t.Fatalf("check-config %s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout:\n%s\nstderr containing %q",
					tt.path, exit, stdout, stderr, tt.exit, tt.stdout, tt.inStderr)
			}
		})
	}
}

// TestUpstreamUnits: every unit is served as its own unit, its window
// aligned to the Unix epoch as upstream aligns it (a week is 7 days, a
// month 30 and a year 365).
func TestUpstreamUnits(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		key    string
		unit   unit
		period time.Duration
	}{
		{"per_second", second, time.Second},
		{"per_minute", minute, time.Minute},
		{"per_hour", rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
		{"per_day", rlsv3.RateLimitResponse_RateLimit_DAY, day},
		{"per_week", rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * day},
		{"per_month", rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * day},
		{"per_year", rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * day},
	}
	h := start(t, "testdata/upstream")
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			reset := tt.period - time.Duration(t0%int64(tt.period))
			wantStatuses(t, h.call(t, req("payments", desc(tt.key, "x"))), st(okCode, limit("", 10, tt.unit, 0), 9, reset))
		})
	}
}

// TestUpstreamDecisions: requests against testdata/upstream, decided as
// upstream's README describes. Each case starts afresh, makes calls-1
// identical calls and checks the last.
func TestUpstreamDecisions(t *testing.T) {
	perSecond := func(n uint32) *rlsv3.RateLimitResponse_RateLimit { return limit("", n, second, 0) }
	perMinute := func(n uint32) *rlsv3.RateLimitResponse_RateLimit { return limit("", n, minute, 0) }
	tests := []struct {
		name    string
		domain  string
		descs   []*rlcommonv3.RateLimitDescriptor
		calls   int
		overall rlsv3.RateLimitResponse_Code
		want    []*dstatus
	}{
		// Nested descriptors; a placeholder has no limit.
		{"placeholder alone is not limited", "payments", ds(desc("merchant", "acme")), 10, okCode, []*dstatus{unmatched}},
		{"nested exact value", "payments", ds(desc("merchant", "acme", "card_type", "amex")), 3, over,
			[]*dstatus{st(over, perMinute(2), 0, time.Minute)}},
		{"nested key only", "payments", ds(desc("merchant", "acme", "card_type", "visa")), 4, okCode,
			[]*dstatus{st(okCode, perMinute(4), 0, time.Minute)}},
		{"key only at the top, with its own limit", "payments", ds(desc("merchant", "globex")), 6, okCode,
			[]*dstatus{st(okCode, perMinute(6), 0, time.Minute)}},
		{"key only, nested key only", "payments", ds(desc("merchant", "globex", "card_type", "visa")), 4, over,
			[]*dstatus{st(over, perMinute(3), 0, time.Minute)}},
		{"key only: each value its own bucket", "payments",
			ds(desc("merchant", "acme", "card_type", "visa"), desc("merchant", "acme", "card_type", "jcb")), 2, okCode,
			[]*dstatus{st(okCode, perMinute(4), 2, time.Minute), st(okCode, perMinute(4), 2, time.Minute)}},
		{"neither limit nor nested descriptors: never limited", "payments", ds(desc("merchant", "internal")), 20, okCode, []*dstatus{unmatched}},
		{"no backtracking past an exact value", "payments", ds(desc("merchant", "internal", "card_type", "visa")), 20, okCode, []*dstatus{unmatched}},

		// Wildcards at every level; exact values first.
		{"top-level wildcard", "edge", ds(desc("host", "api.example.com")), 4, over,
			[]*dstatus{st(over, perSecond(3), 0, time.Second)}},
		{"wildcard: each value its own bucket", "edge", ds(desc("host", "api.a"), desc("host", "api.b")), 1, okCode,
			[]*dstatus{st(okCode, perSecond(3), 2, time.Second), st(okCode, perSecond(3), 2, time.Second)}},
		{"key only beside a wildcard", "edge", ds(desc("host", "www.example.com")), 5, okCode,
			[]*dstatus{st(okCode, perSecond(5), 0, time.Second)}},
		{"nested wildcard", "edge", ds(desc("host", "api.x", "path", "/v1/orders")), 3, over,
			[]*dstatus{st(over, perSecond(2), 0, time.Second)}},
		{"exact value before a wildcard", "edge", ds(desc("host", "api.x", "path", "/v1/admin")), 2, over,
			[]*dstatus{st(over, perSecond(1), 0, time.Second)}},
		{"* two levels down", "edge", ds(desc("host", "api.x", "path", "/v1/orders", "method", "GET")), 2, over,
			[]*dstatus{st(over, perSecond(1), 0, time.Second)}},
		{"* matches the empty value", "edge", ds(desc("host", "api.x", "path", "/v1/orders", "method", "")), 1, okCode,
			[]*dstatus{st(okCode, perSecond(1), 0, time.Second)}},
		{"no wildcard or key only matches", "edge", ds(desc("host", "api.x", "path", "/v2/orders")), 10, okCode, []*dstatus{unmatched}},
		{"a key-only host has no nested descriptors", "edge", ds(desc("host", "www.x", "path", "/v1/orders")), 10, okCode, []*dstatus{unmatched}},
		{"unlimited: OK with the largest remaining", "edge", ds(desc("remote_address", "10.1.1.1")), 100, okCode, []*dstatus{unlimited}},
		{"requests_per_unit 0 denies every request", "edge", ds(desc("remote_address", "10.6.6.6")), 1, over,
			[]*dstatus{st(over, perSecond(0), 0, 0)}},
		{"others at their limit", "edge", ds(desc("remote_address", "10.0.0.2")), 5, over,
			[]*dstatus{st(over, perSecond(4), 0, time.Second)}},

		// shadow_mode and replaces.
		{"shadow_mode never limits", "rollout", ds(desc("service", "s", "user", "beta-tester")), 5, okCode,
			[]*dstatus{st(okCode, perSecond(1), 0, time.Second)}},
		{"the same rule level, enforced", "rollout", ds(desc("service", "s", "user", "someone")), 3, over,
			[]*dstatus{st(over, perSecond(2), 0, time.Second)}},
		{"replaced limit is dropped and not counted", "rollout",
			ds(desc("team", "core", "user", "u"), desc("oncall", "true", "user", "u")), 6, okCode,
			[]*dstatus{unmatched, st(okCode, perMinute(6), 0, time.Minute)}},
		{"alone, the replaced limit applies", "rollout", ds(desc("team", "core", "user", "u")), 4, over,
			[]*dstatus{st(over, limit("core_user", 3, minute, 0), 0, time.Minute)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, "testdata/upstream")
			r := req(tt.domain, tt.descs...)
			for range tt.calls - 1 {
				h.call(t, r)
			}
			got := h.call(t, r)
			if got.OverallCode != tt.overall {
				t.Fatalf("overall %v, want %v: %v", got.OverallCode, tt.overall, text(got))
			}
			wantStatuses(t, got, tt.want...)
		})
	}
}

func ds(d ...*rlcommonv3.RateLimitDescriptor) []*rlcommonv3.RateLimitDescriptor { return d }
