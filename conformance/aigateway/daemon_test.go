package aigateway

import (
	"encoding/json"
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

	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
)

// translation is what a control plane's code makes of a user's resources:
// the rate limit service's configuration, and the rate limit filter's on
// each Envoy route (by the route's key: see the drivers).
type translation struct {
	configs []*rlsconfv3.RateLimitConfig
	routes  map[string]*ratelimitfilterv3.RateLimitPerRoute
}

// aiGateway runs AI Gateway's QuotaPolicy translator and extension server
// (aigwdriver) over resources, YAML as a user applies it.
func aiGateway(t *testing.T, resources string) translation {
	t.Helper()
	return translate(t, "AI Gateway", binaries.aigwDriver, resources)
}

// envoyGateway runs Envoy Gateway's translators (egdriver) over resources,
// YAML as a user applies it.
func envoyGateway(t *testing.T, resources string) translation {
	t.Helper()
	return translate(t, "Envoy Gateway", binaries.egDriver, resources)
}

func translate(t *testing.T, project, driver, resources string) translation {
	t.Helper()
	cmd := exec.Command(driver)
	cmd.Stdin = strings.NewReader(resources)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s's translation: %v\n%s", project, err, stderr.String())
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
		t.Fatalf("%s made no rate limit configuration of these resources:\n%s", project, out)
	}
	return tr
}

// deployment is ratelimitd deployed as a control plane deploys its rate
// limit service, with that control plane serving it the policy.
type deployment struct {
	node   string
	xds    *xdstest.Server
	envoy  *envoy
	logs   *logtest.Buffer
	exited chan struct{}
	cmd    *exec.Cmd
}

// how is how a control plane deploys envoyproxy/ratelimit: the xDS node it
// serves, the environment (given the addresses of the xDS server, of Redis
// and the gRPC and HTTP ports) and the command-line arguments.
type how struct {
	node string
	env  func(xds, redis, grpcPort, httpPort string) []string
	args []string
}

// asAIGatewayDeploysIt is AI Gateway's manifest for its rate limit service
// (tests/e2e/testdata/backend_quota_ratelimit.yaml, Deployment
// envoy-ai-gateway-ratelimit): /bin/ratelimit with its environment, node
// envoy-ai-gateway-ratelimit (the node its controller's xDS runner serves,
// runner.NodeID). args are the command line: the manifest's is
// --quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system.
func asAIGatewayDeploysIt(args ...string) how {
	return how{node: "envoy-ai-gateway-ratelimit", args: args, env: func(xds, redis, grpcPort, httpPort string) []string {
		return []string{
			// The manifest's, as it is.
			"LOG_LEVEL=debug",
			"REDIS_SOCKET_TYPE=tcp",
			"REDIS_URL=" + redis,
			"RUNTIME_ROOT=/data",
			"RUNTIME_SUBDIRECTORY=ratelimit",
			"USE_STATSD=false",
			"CONFIG_TYPE=GRPC_XDS_SOTW",
			"CONFIG_GRPC_XDS_NODE_ID=envoy-ai-gateway-ratelimit",
			"CONFIG_GRPC_XDS_SERVER_URL=" + xds,
			"GRPC_PORT=" + grpcPort,
			// The test's: every port on loopback (the manifest's are
			// upstream's defaults, on every interface).
			"GRPC_HOST=127.0.0.1",
			"HOST=127.0.0.1", "PORT=" + httpPort,
		}
	}}
}

// asEnvoyGatewayDeploysIt is Envoy Gateway's deployment of its rate limit
// service (internal/infrastructure/kubernetes/ratelimit), without its TLS
// (cmd/ratelimitd's TestAsEnvoyGatewayDeploysIt runs it with TLS) and
// without the metrics port.
func asEnvoyGatewayDeploysIt() how {
	return how{node: "envoy-ratelimit", env: func(xds, redis, grpcPort, httpPort string) []string {
		return []string{
			"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
			"LOG_LEVEL=info", "USE_STATSD=false",
			"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + xds, "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
			"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis,
			"HOST=127.0.0.1", "PORT=" + httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		}
	}}
}

// deploy starts ratelimitd as h says, as /bin/ratelimit (its name in
// upstream's image), on a Redis of its own, with an xDS server serving tr's
// configs at version "1"; its ports are on loopback. It returns once the
// policy is ACKed.
func deploy(t *testing.T, tr translation, h how) *deployment {
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
	xds.Set(h.node, "1", tr.configs...)
	redis := redistest.Start(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	env := append([]string{"PATH=" + os.Getenv("PATH")}, h.env(xds.Addr(), redis.Addr(), port(grpcAddr), port(httpAddr))...)
	args := h.args
	cmd := exec.Command(ratelimit, args...)
	cmd.Env = env
	d := &deployment{node: h.node, xds: xds, logs: &logtest.Buffer{}, exited: make(chan struct{}), cmd: cmd}
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-d.exited
		if t.Failed() {
			t.Logf("the logs of ratelimit %s:\n%s", strings.Join(args, " "), d.logs)
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
// the control plane pushes a policy its user edited.
func (d *deployment) update(t *testing.T, version string, tr translation) {
	t.Helper()
	d.xds.Set(d.node, version, tr.configs...)
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
				t.Fatalf("ratelimit refused (NACKed) the policy: %s", r.GetErrorDetail().GetMessage())
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
