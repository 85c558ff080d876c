package aigateway

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimitd/ratelimitd/internal/logtest"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/xdspolicy/xdstest"
)

// nodeID is the xDS node of AI Gateway's rate limit service: the node its
// controller's xDS runner serves (runner.NodeID), as its deployment names it
// (CONFIG_GRPC_XDS_NODE_ID).
const nodeID = "envoy-ai-gateway-ratelimit"

// translation is what AI Gateway's code makes of a user's resources.
type translation struct {
	configs []*rlsconfv3.RateLimitConfig
	routes  map[string]*ratelimitfilterv3.RateLimitPerRoute
}

// translate runs AI Gateway's QuotaPolicy translator and extension server
// (the driver) over resources, YAML as a user applies it.
func translate(t *testing.T, resources string) translation {
	t.Helper()
	cmd := exec.Command(binaries.driver)
	cmd.Stdin = strings.NewReader(resources)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("AI Gateway's translation: %v\n%s", err, stderr.String())
	}
	var raw struct {
		RateLimitConfigs []json.RawMessage          `json:"rateLimitConfigs"`
		Routes           map[string]json.RawMessage `json:"routes"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatal(err)
	}
	tr := translation{routes: map[string]*ratelimitfilterv3.RateLimitPerRoute{}}
	for _, b := range raw.RateLimitConfigs {
		c := &rlsconfv3.RateLimitConfig{}
		if err := protojson.Unmarshal(b, c); err != nil {
			t.Fatal(err)
		}
		tr.configs = append(tr.configs, c)
	}
	for k, b := range raw.Routes {
		pr := &ratelimitfilterv3.RateLimitPerRoute{}
		if err := protojson.Unmarshal(b, pr); err != nil {
			t.Fatal(err)
		}
		tr.routes[k] = pr
	}
	if len(tr.configs) == 0 || len(tr.routes) == 0 {
		t.Fatalf("AI Gateway made no rate limit configuration of these resources:\n%s", out)
	}
	return tr
}

// deployment is ratelimitd deployed as AI Gateway deploys its rate limit
// service, with AI Gateway's controller serving it the policy.
type deployment struct {
	xds    *xdstest.Server
	envoy  *envoy
	logs   *logtest.Buffer
	exited chan struct{}
	cmd    *exec.Cmd
}

// deploy starts ratelimitd as AI Gateway's manifest
// (tests/e2e/testdata/backend_quota_ratelimit.yaml, Deployment
// envoy-ai-gateway-ratelimit) starts envoyproxy/ratelimit: the binary as
// /bin/ratelimit, with the manifest's environment, on a Redis of its own
// and an xDS server serving tr's configs at version "1"; args are the
// command-line arguments. Its ports are on loopback. It returns once the
// policy is ACKed.
func deploy(t *testing.T, tr translation, args ...string) *deployment {
	t.Helper()
	waitForWindow(t)
	dir := t.TempDir()
	ratelimit := filepath.Join(dir, "bin", "ratelimit")
	if err := os.MkdirAll(filepath.Dir(ratelimit), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binaries.daemon, ratelimit); err != nil {
		t.Fatal(err)
	}
	xds := xdstest.Start(t, nil)
	xds.Set(nodeID, "1", tr.configs...)
	redis := redistest.Start(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		// The manifest's, as it is.
		"LOG_LEVEL=debug",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redis.Addr(),
		"RUNTIME_ROOT=/data",
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID=" + nodeID,
		"CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr(),
		"GRPC_PORT=" + port(grpcAddr),
		// The test's: every port on loopback (the manifest's are
		// upstream's defaults, on every interface).
		"GRPC_HOST=127.0.0.1",
		"HOST=127.0.0.1", "PORT=" + port(httpAddr),
	}
	cmd := exec.Command(ratelimit, args...)
	cmd.Env = env
	d := &deployment{xds: xds, logs: &logtest.Buffer{}, exited: make(chan struct{}), cmd: cmd}
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-d.exited
		if t.Failed() {
			t.Logf("ratelimit %s: its logs:\n%s", strings.Join(args, " "), d.logs)
		}
	})
	d.waitACK(t, "1")

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d.envoy = &envoy{t: t, client: rlsv3.NewRateLimitServiceClient(conn), routes: tr.routes}
	return d
}

// update serves tr's configs at version and waits for the daemon's ACK, as
// AI Gateway's controller pushes a QuotaPolicy edited by its user.
func (d *deployment) update(t *testing.T, version string, tr translation) {
	t.Helper()
	d.xds.Set(nodeID, version, tr.configs...)
	d.waitACK(t, version)
	d.envoy.routes = tr.routes
}

// waitACK waits up to 20 seconds for the daemon to ACK version; it fails
// the test at once if the daemon exits or NACKs it.
func (d *deployment) waitACK(t *testing.T, version string) {
	t.Helper()
	isACK := xdstest.IsACK(version)
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, r := range d.xds.Requests() {
			if isACK(r) {
				return
			}
			if xdstest.IsNACK(r) {
				t.Fatalf("ratelimit refused (NACKed) the policy AI Gateway made: %s", r.GetErrorDetail().GetMessage())
			}
		}
		select {
		case <-d.exited:
			t.Fatalf("ratelimit exited (%v) before it ACKed the policy", d.cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ratelimit did not ACK version %s within 20s", version)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitForWindow waits, when less than two minutes are left of the current
// day (UTC), until the next one starts: every quota here is per day
// ("1d", a fixed window aligned to the Unix epoch, as envoyproxy/ratelimit
// aligns it), and a case must run inside one window.
func waitForWindow(t *testing.T) {
	now := time.Now().UTC()
	next := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if left := next.Sub(now); left < 2*time.Minute {
		t.Logf("waiting %v for the next day's window", left)
		time.Sleep(left + time.Second)
	}
}

func (d *deployment) String() string { return fmt.Sprintf("ratelimit pid %d", d.cmd.Process.Pid) }
