package daemon_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// aclUser makes the Redis user ratelimitd have the ACL docs/redis.md
// recommends, less the rules in drop, and password "secret" (whatever it
// had before).
func aclUser(t *testing.T, srv *redistest.Server, drop ...string) {
	t.Helper()
	fields := redistest.RecommendedACL(t)
	args := append([]string{}, fields[:3]...) // ACL SETUSER ratelimitd
	args = append(args, "reset")
	for _, a := range fields[3:] {
		if !slices.Contains(drop, a) {
			args = append(args, a)
		}
	}
	if reply, err := srv.Command(args...); err != nil || reply != "+OK" {
		t.Fatalf("%s: %q %v", strings.Join(args, " "), reply, err)
	}
}

// TestRedisConfigErrorsAtStart: a daemon whose Redis user lacks a command
// the store uses, or whose password is wrong, does not start, and says
// what Redis refused; with the ACL docs/redis.md recommends it starts.
func TestRedisConfigErrorsAtStart(t *testing.T) {
	srv := redistest.Start(t)
	tests := []struct {
		name     string
		drop     []string // from the recommended ACL
		password string
		want     []string // in the error
	}{
		{"the recommended ACL", nil, "secret", nil},
		{"an ACL without SETRANGE", []string{"+setrange"}, "secret", []string{"SETRANGE", "NOPERM", "configuration error"}},
		{"an ACL without EVALSHA", []string{"+evalsha"}, "secret", []string{"EVALSHA", "NOPERM"}},
		{"a wrong password", nil, "wrong", []string{"WRONGPASS", "AUTH", "configuration error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aclUser(t, srv, tt.drop...)
			d, err := daemon.Start(daemon.Config{
				GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: "redis",
				Redis: redisstore.Config{Addr: srv.Addr(), Username: "ratelimitd", Password: tt.password, Timeout: 2 * time.Second},
			})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("with the recommended ACL: %v", err)
				}
				d.Shutdown(context.Background())
				return
			}
			if err == nil {
				d.Shutdown(context.Background())
				t.Fatal("the daemon started")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to say %q", err, w)
				}
			}
		})
	}
}

// windowPolicy is a fixed window: its charges after the window's first
// overwrite the count in place (SETRANGE).
const windowPolicy = `
domain: shared
descriptors:
  - key: tenant
    rate_limit: {name: per-tenant, algorithm: fixed_window, unit: hour, requests_per_unit: 25}
`

// TestRedisACLChangedAtRuntime: when Redis starts refusing a command the
// store uses while the daemon runs (SETRANGE, which the 25th charge of a
// fixed window needs), the daemon turns not ready (/readyz says why), logs
// an error, and answers by its failure mode, charging nothing; once the
// ACL is mended it is ready again and decides from Redis.
func TestRedisACLChangedAtRuntime(t *testing.T) {
	tests := []struct {
		mode guard.FailureMode
		want rl.Code // the 25th request of 25 per hour while refused
	}{
		{guard.FailOpen, rl.Code_CODE_OK},
		{guard.FailClosed, rl.Code_CODE_OVER_LIMIT},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			aclUser(t, srv)
			d := daemontest.Start(t, windowPolicy, withRedis(srv.Addr(), tt.mode), func(c *daemon.Config) {
				c.Redis.Username, c.Redis.Password = "ratelimitd", "secret"
			})
			conn := d.Dial(t)
			client := rl.NewRateLimitServiceClient(conn)
			health := func() healthpb.HealthCheckResponse_ServingStatus { // the server's as a whole, as a probe asks
				t.Helper()
				r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
				if err != nil {
					t.Fatal(err)
				}
				return r.Status
			}
			call := func() rl.Code {
				t.Helper()
				r, err := client.ShouldRateLimit(context.Background(), req("shared", desc("tenant", "acme")))
				if err != nil {
					t.Fatal(err)
				}
				return r.OverallCode
			}
			for range 24 {
				call()
			}
			if code, body := d.Get(t, "/readyz"); code != http.StatusOK {
				t.Fatalf("/readyz before the ACL changed: %d %s", code, body)
			}

			if reply, err := srv.Command("ACL", "SETUSER", "ratelimitd", "-setrange"); err != nil || reply != "+OK" {
				t.Fatal(reply, err)
			}
			if got := call(); got != tt.want {
				t.Errorf("Redis refusing SETRANGE, failing %v: %v, want %v", tt.mode, got, tt.want)
			}
			code, body := d.Get(t, "/readyz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "NOPERM") && !strings.Contains(body, "can't run this command") {
				t.Errorf("/readyz with Redis refusing SETRANGE: %d %q; want 503 saying why", code, body)
			}
			wait.For(t, "the error line saying Redis refuses the daemon", func() bool {
				return strings.Contains(d.Logs(), "level=ERROR") && strings.Contains(d.Logs(), "refuses the daemon")
			})
			// gRPC health says what /readyz says (the daemon looks every second).
			wait.For(t, "gRPC health NOT_SERVING", func() bool { return health() == healthpb.HealthCheckResponse_NOT_SERVING })

			if reply, err := srv.Command("ACL", "SETUSER", "ratelimitd", "+setrange"); err != nil || reply != "+OK" {
				t.Fatal(reply, err)
			}
			// The daemon checks every second while Redis refuses it.
			wait.For(t, "/readyz 200 after the ACL is mended", func() bool { code, _ := d.Get(t, "/readyz"); return code == http.StatusOK })
			wait.For(t, "gRPC health SERVING after the ACL is mended", func() bool { return health() == healthpb.HealthCheckResponse_SERVING })
			if got := call(); got != rl.Code_CODE_OK {
				t.Errorf("after the ACL is mended, the 25th: %v, want OK from Redis (the refused request charged nothing)", got)
			}
			if got := call(); got != rl.Code_CODE_OVER_LIMIT {
				t.Errorf("after the ACL is mended, the 26th: %v, want over limit, from Redis", got)
			}
		})
	}
}
