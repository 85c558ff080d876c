package main

import (
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo"
)

func smokeRun(t *testing.T, d *daemontest.Daemon, extra ...string) (int, string) {
	t.Helper()
	var out, errs strings.Builder
	code := run(append([]string{"-grpc", d.GRPCAddr(), "-http", d.HTTPAddr(), "-timeout", "10s"}, extra...), &out, &errs)
	return code, out.String() + errs.String()
}

// TestSmokePasses: against a fresh daemon serving Policy, every check
// holds, and -print-policy prints that policy.
func TestSmokePasses(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"-print-policy"}, &out, &out); code != 0 || out.String() != Policy {
		t.Fatalf("-print-policy: exit %d, %q", code, out.String())
	}
	d := daemontest.Start(t, Policy)
	if code, out := smokeRun(t, d, "-revision", buildinfo.Read().Commit); code != 0 || !strings.Contains(out, "smoke: ok") {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
}

// TestSmokeFails: the smoke test fails on a daemon that does not decide as
// it should, on one that was not fresh, and on a wrong revision.
func TestSmokeFails(t *testing.T) {
	tests := []struct {
		name  string
		start func(t *testing.T) *daemontest.Daemon
		extra []string
		want  string
	}{
		{"shadow mode denies nothing", func(t *testing.T) *daemontest.Daemon {
			return daemontest.Start(t, Policy, func(c *daemon.Config) { c.ShadowMode = true })
		}, nil, "call 3: got"},
		{"the default policy", func(t *testing.T) *daemontest.Daemon { return daemontest.Start(t, "") },
			nil, "ratelimit.v1 call 1: got"},
		{"not fresh", func(t *testing.T) *daemontest.Daemon {
			d := daemontest.Start(t, Policy)
			if code, out := smokeRun(t, d); code != 0 {
				t.Fatalf("first run: exit %d:\n%s", code, out)
			}
			return d
		}, nil, "call 1: got"},
		{"another revision", func(t *testing.T) *daemontest.Daemon { return daemontest.Start(t, Policy) },
			[]string{"-revision", "0123456789abcdef0123456789abcdef01234567"}, "does not name revision"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.start(t)
			code, out := smokeRun(t, d, tt.extra...)
			if code != 1 || !strings.Contains(out, tt.want) {
				t.Errorf("exit %d, want 1 with a message naming %q:\n%s", code, tt.want, out)
			}
		})
	}
}

// TestSmokeRestarted: -restarted passes on a daemon whose bucket a full
// run spent, and fails on a fresh one.
func TestSmokeRestarted(t *testing.T) {
	fresh := daemontest.Start(t, Policy)
	if code, out := smokeRun(t, fresh, "-restarted"); code != 1 || !strings.Contains(out, "after the restart: got") {
		t.Errorf("on a fresh daemon: exit %d, want 1:\n%s", code, out)
	}
	spent := daemontest.Start(t, Policy)
	if code, out := smokeRun(t, spent); code != 0 {
		t.Fatalf("full run: exit %d:\n%s", code, out)
	}
	if code, out := smokeRun(t, spent, "-restarted"); code != 0 {
		t.Errorf("on a spent bucket: exit %d, want 0:\n%s", code, out)
	}
}

// TestSmokeWaitsBounded: with nothing listening, it gives up after its
// timeout and says /readyz was not ready.
func TestSmokeWaitsBounded(t *testing.T) {
	var out, errs strings.Builder
	code := run([]string{"-grpc", "127.0.0.1:1", "-http", "127.0.0.1:1", "-timeout", "300ms"}, &out, &errs)
	if code != 1 || !strings.Contains(errs.String(), "/readyz not 200 in time") {
		t.Errorf("exit %d, want 1 naming /readyz: %s", code, errs.String())
	}
}
