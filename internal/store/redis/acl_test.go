package redis_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// setUser runs ACL SETUSER with args (the ACL keyword first).
func setUser(t *testing.T, srv *redistest.Server, args ...string) {
	t.Helper()
	if reply, err := srv.Command(args...); err != nil || reply != "+OK" {
		t.Fatalf("%s: %q %v", strings.Join(args, " "), reply, err)
	}
}

// aclStore returns a store as the Redis user name with password secret,
// on the default key prefix, as the ACL line grants.
func aclStore(t *testing.T, srv *redistest.Server, user string, g guard.Config) *testStore {
	return newGuardedStore(t, redis.Config{Addr: srv.Addr(), Username: user, Password: "secret", KeyPrefix: redis.DefaultKeyPrefix}, g, nil)
}

// everyOperation charges through s what the store does in production: a
// fixed window charged twice (the key set, then its count overwritten in
// place), a token bucket (its state overwritten in place), a limit on the
// bignum path, a peek, a denial, and three charges in one request; each
// decided by Redis as the limits say.
func everyOperation(t *testing.T, s *testStore, user string) {
	t.Helper()
	fixed := mustLimit(t, algorithms.FixedWindow, 2, time.Hour, 0)
	token := mustLimit(t, algorithms.TokenBucket, 10, time.Hour, 0)
	huge := mustLimit(t, algorithms.FixedWindow, 10, algorithms.MaxSpan, 0)
	key := func(k string) []byte { return engineKey("shop", user, k) }
	for i, tc := range []struct {
		charges []store.Charge
		want    []algorithms.Code
	}{
		{[]store.Charge{{Domain: "shop", Key: key("fixed"), Limit: fixed, Cost: 1}}, []algorithms.Code{algorithms.Allowed}},
		{[]store.Charge{{Domain: "shop", Key: key("fixed"), Limit: fixed, Cost: 1}}, []algorithms.Code{algorithms.Allowed}},
		{[]store.Charge{{Domain: "shop", Key: key("fixed"), Limit: fixed, Cost: 1}}, []algorithms.Code{algorithms.Denied}},
		{[]store.Charge{{Domain: "shop", Key: key("fixed"), Limit: fixed, Cost: 0}}, []algorithms.Code{algorithms.Allowed}},
		{[]store.Charge{{Domain: "shop", Key: key("token"), Limit: token, Cost: 3}}, []algorithms.Code{algorithms.Allowed}},
		{[]store.Charge{{Domain: "shop", Key: key("token"), Limit: token, Cost: 3}}, []algorithms.Code{algorithms.Allowed}},
		{[]store.Charge{{Domain: "shop", Key: key("huge"), Limit: huge, Cost: 1}}, []algorithms.Code{algorithms.Allowed}},
		{[]store.Charge{
			{Domain: "shop", Key: key("a"), Limit: token, Cost: 1},
			{Domain: "shop", Key: key("b"), Limit: fixed, Cost: 1},
			{Domain: "shop", Key: key("huge"), Limit: huge, Cost: 1},
		}, []algorithms.Code{algorithms.Allowed, algorithms.Allowed, algorithms.Allowed}},
	} {
		d := apply(t, s, tc.charges...)
		for j := range d {
			if d[j].Code != tc.want[j] {
				t.Fatalf("request %d, charge %d as %s: %+v, want %v", i, j, user, d[j], tc.want[j])
			}
		}
	}
	if d := apply(t, s, store.Charge{Domain: "shop", Key: key("token"), Limit: token}); d[0].Remaining != 4 {
		t.Fatalf("the token bucket as %s has %d remaining, want 4", user, d[0].Remaining)
	}
	if up, why := s.Healthy(); !up {
		t.Fatalf("unhealthy as %s: %s", user, why)
	}
}

// TestACL: a Redis user with exactly the permissions docs/redis.md
// recommends passes the store's check (every command the store uses, the
// undo of a spread request included) and runs every store operation.
func TestACL(t *testing.T) {
	srv := redistest.Start(t)
	setUser(t, srv, redistest.RecommendedACL(t)...)
	s := aclStore(t, srv, "ratelimitd", guard.Config{})
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check as the recommended ACL user: %v", err)
	}
	everyOperation(t, s, "ratelimitd")
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("PING as the ACL user: %v", err)
	}
}

// TestConfigErrors: an ACL without one of the commands the store uses, a
// key pattern that leaves out the store's keys, and a wrong password are
// each found by Check as a configuration error (not an outage) that names
// what Redis refused.
func TestConfigErrors(t *testing.T) {
	srv := redistest.Start(t)
	acl := redistest.RecommendedACL(t)
	without := func(user, drop string) []string {
		args := []string{"ACL", "SETUSER", user}
		for _, a := range acl[3:] {
			if a != drop {
				args = append(args, a)
			}
		}
		return args
	}
	tests := []struct {
		name     string
		acl      []string // ACL SETUSER for the user the store connects as
		password string
		want     []string // in the error, each
	}{
		{"no SETRANGE", without("nosetrange", "+setrange"), "secret", []string{"SETRANGE", "NOPERM", "setrange"}},
		{"no SET", without("noset", "+set"), "secret", []string{"SET", "NOPERM"}},
		{"no GET", without("noget", "+get"), "secret", []string{"GET", "NOPERM"}},
		{"no DEL", without("nodel", "+del"), "secret", []string{"DEL", "NOPERM"}},
		{"no TIME", without("notime", "+time"), "secret", []string{"TIME", "NOPERM"}},
		{"no EVAL", without("noeval", "+eval"), "secret", []string{"EVAL", "NOPERM", "eval"}},
		{"no EVALSHA", without("noevalsha", "+evalsha"), "secret", []string{"EVALSHA", "NOPERM", "evalsha"}},
		{"keys outside the prefix", append(without("otherkeys", "~ratelimitd:*"), "~other:*"), "secret", []string{"NOPERM"}},
		{"a wrong password", without("wrongpass", ""), "not the secret", []string{"WRONGPASS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setUser(t, srv, tt.acl...)
			s := newTestStore(t, redis.Config{Addr: srv.Addr(), Username: tt.acl[2], Password: tt.password, KeyPrefix: redis.DefaultKeyPrefix}, nil)
			err := s.Check(context.Background())
			if !guard.IsConfigError(err) {
				t.Fatalf("Check: %v, want a configuration error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %q, want it to say %q", err, w)
				}
			}
		})
	}
}

// TestACLChangedAtRuntime: when Redis starts refusing a command the store
// uses (ACL SETUSER ... -setrange while the daemon runs), requests are
// decided by the failure mode, the store is misconfigured (Healthy and
// Misconfigured say why), an error is logged, and a ping that Redis
// answers does not end it; once the ACL is mended, the next ping checks,
// finds everything allowed, and the store decides from Redis again.
func TestACLChangedAtRuntime(t *testing.T) {
	fixed := mustLimit(t, algorithms.FixedWindow, 5, time.Hour, 0)
	tests := []struct {
		mode guard.FailureMode
		want algorithms.Decision // while refused, of a second charge of 1
	}{
		{guard.FailOpen, algorithms.Decision{Remaining: 4, ResetAfter: time.Hour}},
		{guard.FailClosed, algorithms.Decision{Code: algorithms.Denied, RetryAfter: guard.FailClosedRetryAfter}},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			setUser(t, srv, redistest.RecommendedACL(t)...)
			var logs logtest.Buffer
			s := newGuardedStore(t, redis.Config{Addr: srv.Addr(), Username: "ratelimitd", Password: "secret", KeyPrefix: redis.DefaultKeyPrefix,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))}, guard.Config{FailureMode: tt.mode}, nil)
			charge := store.Charge{Domain: "shop", Key: engineKey("shop", tt.mode.String()), Limit: fixed, Cost: 1}
			if d := apply(t, s, charge); d[0].Code != algorithms.Allowed || d[0].Remaining != 4 {
				t.Fatalf("first charge: %+v", d[0])
			}

			setUser(t, srv, "ACL", "SETUSER", "ratelimitd", "-setrange")
			d := apply(t, s, charge) // the window's second charge writes in place
			if d[0].Code != tt.want.Code || d[0].RetryAfter != tt.want.RetryAfter || d[0].Remaining != tt.want.Remaining {
				t.Errorf("refused: %+v, want the failure mode's %+v", d[0], tt.want)
			}
			err := s.Misconfigured()
			if !guard.IsConfigError(err) || !strings.Contains(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "can't run this command") {
				t.Fatalf("Misconfigured() = %v, want Redis's refusal", err)
			}
			if up, why := s.Healthy(); up || !strings.Contains(why, "misconfigured") {
				t.Errorf("Healthy() = %v, %q; want down, misconfigured", up, why)
			}
			if err := s.Ping(context.Background()); !guard.IsConfigError(err) || !strings.Contains(err.Error(), "SETRANGE") {
				t.Errorf("Ping while refused: %v; want the check's refusal, naming SETRANGE", err)
			}
			if s.Misconfigured() == nil {
				t.Error("a ping ended the misconfiguration while Redis still refuses SETRANGE")
			}
			var errorLine string
			wait.For(t, "the error line saying Redis refuses the daemon", func() bool {
				i := slices.IndexFunc(strings.Split(logs.String(), "\n"), func(l string) bool {
					return strings.Contains(l, "level=ERROR") && strings.Contains(l, "refuses the daemon")
				})
				if i >= 0 {
					errorLine = strings.Split(logs.String(), "\n")[i]
				}
				return i >= 0
			})
			if !strings.Contains(errorLine, "failure_mode="+tt.mode.String()) {
				t.Errorf("the error line %q does not name the failure mode", errorLine)
			}

			setUser(t, srv, "ACL", "SETUSER", "ratelimitd", "+setrange")
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping once the ACL is mended: %v", err)
			}
			if up, why := s.Healthy(); !up || s.Misconfigured() != nil {
				t.Fatalf("after the ACL is mended: Healthy() = %v, %q; Misconfigured() = %v", up, why, s.Misconfigured())
			}
			if d := apply(t, s, charge); d[0].Code != algorithms.Allowed || d[0].Remaining != 3 {
				t.Errorf("after the ACL is mended: %+v, want allowed from Redis with 3 remaining", d[0])
			}
		})
	}
}
