package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const xdsNode = "envoy-ratelimit"

// shopConfig is domain shop: n requests a minute per user.
func shopConfig(n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "shop", Domain: "shop", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

func startXDS(t *testing.T, srv *xdstest.Server, withoutPolicy bool) *harness {
	t.Helper()
	d := daemontest.StartConfig(t, daemon.Config{
		XDS:                xdspolicy.Config{Server: srv.Addr(), NodeID: xdsNode, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
		StartWithoutPolicy: withoutPolicy,
	})
	conn := d.Dial(t)
	return &harness{d: d, clock: d.Clock, client: rl.NewRateLimitServiceClient(conn), conn: conn}
}

// waitHTTP polls path until it answers code, and returns the body.
func waitHTTP(t *testing.T, d *daemontest.Daemon, path string, code int) string {
	t.Helper()
	var body string
	wait.For(t, fmt.Sprintf("GET %s to answer %d", path, code), func() bool {
		var got int
		got, body = d.Get(t, path)
		return got == code
	})
	return body
}

func codes3(t *testing.T, h *harness, user string, n int) []rl.Code {
	t.Helper()
	var got []rl.Code
	for range n {
		got = append(got, h.call(t, req("shop", desc("user", user))).OverallCode)
	}
	return got
}

func TestXDSPolicyLifecycle(t *testing.T) {
	srv := xdstest.Start(t, nil)
	h := startXDS(t, srv, false)

	// No policy yet: not ready, not healthy, decisions refused.
	if code, _ := h.d.Get(t, "/readyz"); code != 503 {
		t.Errorf("/readyz %d before the first policy, want 503", code)
	}
	if code, body := h.d.Get(t, "/healthcheck"); code != 500 || body != "" {
		t.Errorf("/healthcheck %d %q before the first policy, want 500 and no body", code, body)
	}
	_, err := h.client.ShouldRateLimit(context.Background(), req("shop", desc("user", "a")))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "waiting for its policy") {
		t.Errorf("decision before the first policy: %v, want Unavailable", err)
	}

	// The first policy: ready, and deciding by it.
	srv.Set(xdsNode, "v1", shopConfig(2))
	srv.WaitRequest(xdstest.IsACK("v1"))
	waitHTTP(t, h.d, "/readyz", 200)
	if code, body := h.d.Get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck %d %q, want 200 OK", code, body)
	}
	ok, over := rl.Code_CODE_OK, rl.Code_CODE_OVER_LIMIT
	if got := codes3(t, h, "a", 3); got[0] != ok || got[1] != ok || got[2] != over {
		t.Errorf("v1 (2 a minute): %v, want OK OK OVER_LIMIT", got)
	}

	// A bad update is NACKed; v1 goes on deciding and the NACK shows.
	bad := shopConfig(5)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set(xdsNode, "v2", bad)
	nack := srv.WaitRequest(xdstest.IsNACK)
	if nack.GetVersionInfo() != "v1" {
		t.Errorf("NACK names version %q, want v1", nack.GetVersionInfo())
	}
	if got := codes3(t, h, "b", 3); got[2] != over {
		t.Errorf("after the NACK: %v, want v1 still deciding (third OVER_LIMIT)", got)
	}
	var pol struct {
		Config  string           `json:"config"`
		Version string           `json:"version"`
		XDS     xdspolicy.Status `json:"xds"`
	}
	_, body := h.d.Get(t, "/policies")
	if err := json.Unmarshal([]byte(body), &pol); err != nil {
		t.Fatal(err)
	}
	if pol.Version != "v1" || !strings.HasPrefix(pol.Config, "xds://"+srv.Addr()) || pol.XDS.LastNACKVersion != "v2" || !strings.Contains(pol.XDS.LastNACK, "rate_limit.unit: missing") {
		t.Errorf("/policies: %s", body)
	}
	if _, body := h.d.Get(t, "/console/api/policy"); !strings.Contains(body, `xDS version \"v2\" refused (NACK)`) {
		t.Errorf("console policy: %s, want the NACK as the last failed reload", body)
	}
	_, metrics := h.d.Get(t, "/metrics")
	for _, want := range []string{
		`ratelimitd_xds_policy_info{node_id="envoy-ratelimit",server="` + srv.Addr() + `",version="v1"} 1`,
		`ratelimitd_xds_updates_total{result="refused"} 1`,
		`ratelimitd_xds_connected 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(h.d.Logs(), "policy update refused (NACK)") {
		t.Errorf("logs lack the NACK:\n%s", h.d.Logs())
	}

	// The server restarts; the next update arrives over the new stream.
	srv.Restart()
	srv.Set(xdsNode, "v3", shopConfig(3))
	srv.WaitRequest(xdstest.IsACK("v3"))
	if got := codes3(t, h, "c", 4); got[2] != ok || got[3] != over {
		t.Errorf("v3 (3 a minute): %v, want OK OK OK OVER_LIMIT", got)
	}
	// The raised limit keeps what was used: a, who used v1's 2, has 1 of
	// v3's 3 left.
	if got := codes3(t, h, "a", 2); got[0] != ok || got[1] != over {
		t.Errorf("v3 for a, who used 2 under v1: %v, want OK OVER_LIMIT", got)
	}
	if err := h.d.Reload(); err != nil {
		t.Errorf("Reload with xDS: %v, want nothing to do", err)
	}
}

func TestXDSStartWithoutPolicy(t *testing.T) {
	srv := xdstest.Start(t, nil)
	h := startXDS(t, srv, true)
	// Deciding at once, every domain unknown; healthy for upstream's
	// probe, not ready.
	r := h.call(t, req("shop", desc("user", "a")))
	if r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Matched {
		t.Errorf("before the first policy: %v, want OK and unmatched", r)
	}
	if code, body := h.d.Get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck %d %q, want 200 OK", code, body)
	}
	if code, _ := h.d.Get(t, "/readyz"); code != 503 {
		t.Errorf("/readyz %d before the first policy, want 503", code)
	}
	srv.Set(xdsNode, "v1", shopConfig(1))
	waitHTTP(t, h.d, "/readyz", 200)
	if got := codes3(t, h, "a", 2); got[1] != rl.Code_CODE_OVER_LIMIT {
		t.Errorf("v1 (1 a minute): %v, want OK OVER_LIMIT", got)
	}
	h.d.Stop()
}

func TestXDSRefusedCombinations(t *testing.T) {
	x := xdspolicy.Config{Server: "127.0.0.1:1", NodeID: "n"}
	for _, tc := range []struct {
		cfg  daemon.Config
		want string
	}{
		{daemon.Config{XDS: x, ConfigPath: "/etc/p.yaml"}, "--config and --xds-server"},
		{daemon.Config{XDS: x, StateFile: "/tmp/s"}, "--state-file and --xds-server"},
		{daemon.Config{StartWithoutPolicy: true}, "--xds-start-without-policy without --xds-server"},
	} {
		tc.cfg.GRPCAddr, tc.cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
		if _, err := daemon.Start(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start: %v, want %q", err, tc.want)
		}
	}
}
