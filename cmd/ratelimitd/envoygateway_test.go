package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig/tlstest"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Envoy Gateway's resources for one rule of an HTTPRoute with a global
// rate limit (3 an hour), as its translator names them: a descriptor per
// route rule and match, under the listener's domain.
const (
	egDomain = "default/eg/http"
	egKey1   = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example"
	egKey2   = "rule-0-match-0"
)

func egConfig(perHour uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: egDomain, Domain: egDomain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: egKey1, Value: egKey1,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: egKey2, Value: egKey2,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: perHour},
		}},
	}}}
}

// dashboardSeries are the series that Envoy Gateway's Global Ratelimit
// dashboard queries (envoyproxy/gateway,
// charts/gateway-addons-helm/dashboards/global-ratelimit.json: its panels'
// "expr"), with the labels each reads. app_kubernetes_io_component is
// added by Prometheus from the pod's labels, not by the service.
var dashboardSeries = []string{
	`go_memstats_gc_cpu_fraction`,
	`process_resident_memory_bytes`,
	`process_virtual_memory_bytes`,
	`ratelimit_service_rate_limit_total_hits{domain="` + egDomain + `",key1="` + egKey1 + `_` + egKey1 + `",key2="` + egKey2 + `_` + egKey2 + `"}`,
	`ratelimit_service_rate_limit_near_limit{domain="` + egDomain + `",key1="` + egKey1 + `_` + egKey1 + `",key2="` + egKey2 + `_` + egKey2 + `"}`,
	`ratelimit_service_rate_limit_over_limit{domain="` + egDomain + `",key1="` + egKey1 + `_` + egKey1 + `",key2="` + egKey2 + `_` + egKey2 + `"}`,
}

// TestAsEnvoyGatewayDeploysIt runs the built binary as Envoy Gateway's
// rate limit deployment runs envoyproxy/ratelimit: under the name ratelimit,
// with no flags, with the deployment's environment (the certificates under
// a directory of the test's instead of /certs, loopback ports instead of
// 8080, 8081 and 19001), a real Redis, and a real xDS server over mutual TLS
// standing in for Envoy Gateway's. It probes /healthcheck as the
// deployment's probes do, pushes the policy Envoy Gateway would, asks over
// TLS as Envoy does, and scrapes PROMETHEUS_ADDR as the dashboard's
// Prometheus does.
func TestAsEnvoyGatewayDeploysIt(t *testing.T) {
	t.Parallel()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ratelimit := filepath.Join(dir, "bin", "ratelimit")
	if err := os.MkdirAll(filepath.Dir(ratelimit), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(bin, ratelimit); err != nil {
		t.Fatal(err)
	}

	// The envoy-rate-limit secret: one certificate serving gRPC and
	// identifying the service to the xDS server, and the CA of both.
	ca := tlstest.NewCA(t, "envoy-gateway-ca")
	certs := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	ca.Peer(t, "envoy-ratelimit").Write(t, certs, "tls")
	tlstest.WriteFile(t, filepath.Join(certs, "ca.crt"), ca.PEM)
	xdsPair := ca.Server(t, "envoy-gateway", time.Now().Add(time.Hour))
	xdsCert, err := tls.X509KeyPair(xdsPair.Cert, xdsPair.Key)
	if err != nil {
		t.Fatal(err)
	}
	xds := xdstest.Start(t, &tls.Config{Certificates: []tls.Certificate{xdsCert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	redis := redistest.Start(t)

	grpcAddr, httpAddr, promAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	env := map[string]string{
		// internal/infrastructure/kubernetes/ratelimit/resource.go, as it is.
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.Addr(), "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": certs + "/tls.crt", "GRPC_SERVER_TLS_KEY": certs + "/tls.key", "GRPC_SERVER_TLS_CA_CERT": certs + "/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": certs + "/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": certs + "/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": certs + "/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr(),
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": promAddr, "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
		// The test's ports, on loopback (the deployment's are upstream's
		// defaults on every interface: 8080, 8081, and :19001 above).
		"HOST": "127.0.0.1", "PORT": port(httpAddr), "GRPC_HOST": "127.0.0.1", "GRPC_PORT": port(grpcAddr),
	}
	cmd := exec.Command(ratelimit) // command: ["/bin/ratelimit"], no arguments
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &logtest.Buffer{}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("ratelimit's logs:\n%s", logs)
		}
	})

	// The startup probe: GET /healthcheck on the HTTP port answers 200
	// "OK" once the service runs, before any policy (FORCE_START...).
	probe := func() (int, string) {
		resp, err := http.Get("http://" + httpAddr + "/healthcheck")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait.For(t, "/healthcheck to answer 200", func() bool {
		select {
		case <-exited:
			t.Fatalf("ratelimit exited:\n%s", logs)
		default:
		}
		code, _ := probe()
		return code == 200
	})
	if code, body := probe(); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 OK", code, body)
	}

	// Envoy Gateway pushes the policy; the service ACKs it.
	xds.Set("envoy-ratelimit", "1", egConfig(3))
	xds.WaitRequest(xdstest.IsACK("1"))

	// Envoy asks over TLS, trusting the CA of the envoy-rate-limit secret.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egDomain, Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: egKey1, Value: egKey1}, {Key: egKey2, Value: egKey2}},
		}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetOverallCode()
	}
	var got []string
	for range 4 {
		got = append(got, ask().String())
	}
	if want := "OK OK OK OVER_LIMIT"; strings.Join(got, " ") != want {
		t.Errorf("4 requests against 3 an hour: %v, want %s", got, want)
	}

	// A new policy: the same rule, now 5 an hour. Decided by at once after
	// the ACK, on the same bucket: the 4 counted so far (the 4th charged as
	// overdraft, as upstream counts it) stay counted, as upstream's counter
	// does, so one more is OK.
	xds.Set("envoy-ratelimit", "2", egConfig(5))
	xds.WaitRequest(xdstest.IsACK("2"))
	got = got[:0]
	for range 3 {
		got = append(got, ask().String())
	}
	if want := "OK OVER_LIMIT OVER_LIMIT"; strings.Join(got, " ") != want {
		t.Errorf("3 requests against 5 an hour, 4 counted: %v, want %s", got, want)
	}

	// Prometheus scrapes PROMETHEUS_ADDR: every series the dashboard reads.
	resp, err := http.Get("http://" + promAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	values := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err == nil {
				values[line[:i]] = v
			}
		}
	}
	for _, s := range dashboardSeries {
		if _, ok := values[s]; !ok {
			t.Errorf("PROMETHEUS_ADDR has no series %s", s)
		}
	}
	// The counts are those of the requests above: 7 hits, 3 over the
	// limit; near the limit (80%): the 3rd of 3, and the 5th of 5.
	for i, want := range map[int]float64{3: 7, 4: 2, 5: 3} {
		if got := values[dashboardSeries[i]]; got != want {
			t.Errorf("%s = %v, want %v", dashboardSeries[i], got, want)
		}
	}
	if !strings.Contains(logs.String(), "policy from xDS in force") {
		t.Errorf("no log line of the policy from xDS")
	}
}
