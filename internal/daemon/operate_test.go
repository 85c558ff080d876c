package daemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics/metricstest"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig/tlstest"
)

// dial returns a plaintext client of d.
func dial(t *testing.T, d *daemontest.Daemon) (rl.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn := d.Dial(t)
	return rl.NewRateLimitServiceClient(conn), conn
}

// scrape returns every sample GET /metrics shows, keyed by its series as
// written: `name{label="value",...}`.
func scrape(t *testing.T, d *daemontest.Daemon) map[string]float64 {
	t.Helper()
	code, body := d.Get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	return metricstest.Samples(t, strings.NewReader(body))
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsAfterKnownTraffic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.yaml")
	writeFile(t, path, `
domain: shop
descriptors:
  - key: path
    value: /orders
    rate_limit: {unit: minute, requests_per_unit: 10, name: orders}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`)
	d := daemontest.StartConfig(t, daemon.Config{ConfigPath: path})
	client, _ := dial(t, d)
	ctx := context.Background()
	traffic := []struct {
		req   *rl.ShouldRateLimitRequest
		times int
	}{
		{req("shop", desc("path", "/orders")), 12},
		{req("shop", desc("user", "alice")), 3},
		{req("shop", desc("path", "/cart")), 1}, // matches no rule
	}
	for _, tr := range traffic {
		for range tr.times {
			if _, err := client.ShouldRateLimit(ctx, tr.req); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := client.ShouldRateLimit(ctx, req("", desc("path", "/orders"))); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty domain: %v", err)
	}

	const method = `grpc_method="ShouldRateLimit",grpc_service="ratelimit.v1.RateLimitService",grpc_type="unary"`
	want := map[string]float64{
		// 12 on a limit of 10: the 9th and 10th near it, 2 over.
		`ratelimitd_rule_hits_total{descriptor="",domain="shop",rule="path_/orders"}`:              12,
		`ratelimitd_rule_within_limit_hits_total{descriptor="",domain="shop",rule="path_/orders"}`: 10,
		`ratelimitd_rule_near_limit_hits_total{descriptor="",domain="shop",rule="path_/orders"}`:   2,
		`ratelimitd_rule_over_limit_hits_total{descriptor="",domain="shop",rule="path_/orders"}`:   2,
		`ratelimitd_rule_shadow_mode_hits_total{descriptor="",domain="shop",rule="path_/orders"}`:  0,
		// detailed_metric: counted per value.
		`ratelimitd_rule_hits_total{descriptor="user_alice",domain="shop",rule="user"}`:              3,
		`ratelimitd_rule_within_limit_hits_total{descriptor="user_alice",domain="shop",rule="user"}`: 2,
		`ratelimitd_rule_near_limit_hits_total{descriptor="user_alice",domain="shop",rule="user"}`:   1,
		`ratelimitd_rule_over_limit_hits_total{descriptor="user_alice",domain="shop",rule="user"}`:   1,

		`ratelimitd_decisions_total{code="ok"}`:         10 + 2 + 1,
		`ratelimitd_decisions_total{code="over_limit"}`: 2 + 1,
		`ratelimitd_decision_duration_seconds_count`:    16,

		`ratelimitd_grpc_server_started_total{` + method + `}`:                             17,
		`ratelimitd_grpc_server_handled_total{grpc_code="OK",` + method + `}`:              16,
		`ratelimitd_grpc_server_handled_total{grpc_code="InvalidArgument",` + method + `}`: 1,
		`ratelimitd_grpc_server_handling_seconds_count{` + method + `}`:                    17,

		`ratelimitd_buckets`:                                2, // /orders, alice
		`ratelimitd_buckets_max`:                            memory.DefaultMaxBuckets,
		`ratelimitd_bucket_bytes_max`:                       memory.DefaultMaxBytes,
		`ratelimitd_bucket_evictions_total`:                 0,
		`ratelimitd_policy_reloads_total{result="success"}`: 0,
		`ratelimitd_policy_reloads_total{result="failure"}`: 0,
		`ratelimitd_policy_last_reload_successful`:          1,
	}
	got := scrape(t, d)
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	// Two buckets of short keys, in one domain.
	if b := got[`ratelimitd_bucket_bytes`]; b < float64(2*memory.BucketBytes(1)+memory.DomainBytes(1)) ||
		b > float64(2*memory.BucketBytes(memory.MaxVerbatimKey)+memory.DomainBytes(memory.MaxVerbatimKey)) {
		t.Errorf("ratelimitd_bucket_bytes = %v, want two short-keyed buckets' worth and their domain's", b)
	}
	if got[`ratelimitd_policy_last_reload_success_timestamp_seconds`] < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last reload time %v is not the start", got[`ratelimitd_policy_last_reload_success_timestamp_seconds`])
	}
	for series := range got {
		if strings.Contains(series, `rule="path_/cart"`) || strings.Contains(series, `descriptor="",domain="shop",rule="user"`) {
			t.Errorf("unexpected series %s", series)
		}
	}
}

const (
	policyV1 = `
domain: shop
descriptors:
  - key: kept
    rate_limit: {unit: minute, requests_per_unit: 5, name: kept}
  - key: changed
    rate_limit: {unit: minute, requests_per_unit: 5, name: changed}
`
	// kept is untouched, changed gets a new limit, added is new.
	policyV2 = `
domain: shop
descriptors:
  - key: kept
    rate_limit: {unit: minute, requests_per_unit: 5, name: kept}
  - key: changed
    rate_limit: {unit: minute, requests_per_unit: 20, name: changed}
  - key: added
    rate_limit: {unit: minute, requests_per_unit: 1, name: added}
`
	policyInvalid = `
domain: shop
descriptors:
  - key: kept
    rate_limit: {unit: fortnight, requests_per_unit: 5}
`
)

// layout is a way of keeping the policy on disk, and of changing it.
type layout struct {
	name string
	// setup writes the first policy and returns the --config path and a
	// function that replaces the policy.
	setup func(t *testing.T, dir, policy string) (config string, change func(policy string))
}

var layouts = []layout{
	{"a file edited in place", func(t *testing.T, dir, policy string) (string, func(string)) {
		path := filepath.Join(dir, "shop.yaml")
		writeFile(t, path, policy)
		return path, func(p string) { writeFile(t, path, p) }
	}},
	{"a directory whose file is replaced by a rename", func(t *testing.T, dir, policy string) (string, func(string)) {
		path := filepath.Join(dir, "shop.yaml")
		writeFile(t, path, policy)
		return dir, func(p string) {
			tmp := filepath.Join(dir, ".shop.yaml.tmp")
			writeFile(t, tmp, p)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"a ConfigMap volume (--config the directory)", func(t *testing.T, dir, policy string) (string, func(string)) {
		cm := newConfigMap(t, dir, policy)
		return dir, cm.swap
	}},
	{"a ConfigMap volume (--config the file)", func(t *testing.T, dir, policy string) (string, func(string)) {
		cm := newConfigMap(t, dir, policy)
		return filepath.Join(dir, "shop.yaml"), cm.swap
	}},
}

// configMap keeps a policy as a Kubernetes ConfigMap volume does: the data
// in a timestamped directory, "..data" a link to it, and "shop.yaml" a link
// to "..data/shop.yaml".
type configMap struct {
	t   *testing.T
	dir string
	gen int
}

func newConfigMap(t *testing.T, dir, policy string) *configMap {
	cm := &configMap{t: t, dir: dir}
	cm.swap(policy)
	if err := os.Symlink(filepath.Join("..data", "shop.yaml"), filepath.Join(dir, "shop.yaml")); err != nil {
		t.Fatal(err)
	}
	return cm
}

// swap publishes a new generation as the kubelet does: a new directory, a
// "..data_tmp" link to it renamed over "..data", the old one removed.
func (cm *configMap) swap(policy string) {
	cm.gen++
	gen := filepath.Join(cm.dir, "..2026_01_01_00_00_00."+strconv.Itoa(cm.gen))
	if err := os.Mkdir(gen, 0o755); err != nil {
		cm.t.Fatal(err)
	}
	writeFile(cm.t, filepath.Join(gen, "shop.yaml"), policy)
	tmp := filepath.Join(cm.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		cm.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(cm.dir, "..data")); err != nil {
		cm.t.Fatal(err)
	}
	if cm.gen > 1 {
		os.RemoveAll(filepath.Join(cm.dir, "..2026_01_01_00_00_00."+strconv.Itoa(cm.gen-1)))
	}
}

func TestHotReload(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			path, change := l.setup(t, t.TempDir(), policyV1)
			d := daemontest.StartConfig(t, daemon.Config{ConfigPath: path})
			client, _ := dial(t, d)
			ctx := context.Background()
			call := func(d *rl.Descriptor) *rl.DescriptorStatus {
				t.Helper()
				r, err := client.ShouldRateLimit(ctx, req("shop", d))
				if err != nil {
					t.Fatal(err)
				}
				return r.Statuses[0]
			}
			for range 3 {
				call(desc("kept", "k"))
				call(desc("changed", "k"))
			}
			reloads := func(result string) float64 {
				return scrape(t, d)[`ratelimitd_policy_reloads_total{result="`+result+`"}`]
			}

			// A valid change: new limits apply, the untouched rule's
			// bucket keeps its state, and the changed rule's keeps what
			// was used: 3 of its new 20.
			change(policyV2)
			wait.For(t, "the valid policy to be reloaded", func() bool { return reloads("success") == 1 })
			if st := call(peek(desc("kept", "k"))); st.Remaining != 2 {
				t.Errorf("kept: remaining %d after the reload, want 2 (its bucket kept)", st.Remaining)
			}
			if st := call(peek(desc("changed", "k"))); st.Remaining != 17 || st.Rule.GetRequests() != 20 {
				t.Errorf("changed: remaining %d of %d, want 17 of 20 (the 3 used kept)", st.Remaining, st.Rule.GetRequests())
			}
			if st := call(desc("added", "k")); !st.Matched || st.Rule.GetName() != "added" {
				t.Errorf("added: %v, want matched by the new rule", st)
			}
			if got := scrape(t, d)[`ratelimitd_policy_last_reload_successful`]; got != 1 {
				t.Errorf("last_reload_successful %v", got)
			}

			// An invalid change: rejected, counted, logged with the reason,
			// and the previous policy goes on serving.
			change(policyInvalid)
			wait.For(t, "the invalid policy to be rejected", func() bool { return reloads("failure") == 1 })
			if st := call(peek(desc("added", "k"))); !st.Matched {
				t.Error("the previous policy is no longer in force after an invalid reload")
			}
			if st := call(peek(desc("kept", "k"))); st.Remaining != 2 {
				t.Errorf("kept: remaining %d after the failed reload, want 2", st.Remaining)
			}
			if got := scrape(t, d)[`ratelimitd_policy_last_reload_successful`]; got != 0 {
				t.Errorf("last_reload_successful %v after a failure", got)
			}
			if s := d.Logs(); !strings.Contains(s, "policy reload failed") || !strings.Contains(s, `unknown unit \"fortnight\"`) {
				t.Errorf("the failure's reason is not logged:\n%s", s)
			}
			if got := reloads("success"); got != 1 {
				t.Errorf("successful reloads %v, want 1", got)
			}
		})
	}
}

// TestReloadCall: Reload (what SIGHUP calls) applies a valid policy before
// it returns, and rejects an invalid one with its problems.
func TestReloadCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.yaml")
	writeFile(t, path, policyV1)
	d := daemontest.StartConfig(t, daemon.Config{ConfigPath: path})
	writeFile(t, path, policyV2)
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if d.Engine().Policy().Domain("shop").Match([]config.Entry{{Key: "added", Value: "x"}}) == nil {
		t.Fatal("Reload returned before the new policy was in force")
	}
	writeFile(t, path, policyInvalid)
	if err := d.Reload(); err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("Reload of an invalid policy: %v", err)
	}
	if d.Engine().Policy().Domain("shop").Match([]config.Entry{{Key: "added", Value: "x"}}) == nil {
		t.Fatal("an invalid policy replaced the previous one")
	}

	// The embedded default has nothing to reload.
	d = daemontest.StartConfig(t, daemon.Config{})
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
}

func TestPoliciesEndpoint(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "shop.yaml"), policyV1)
	writeFile(t, filepath.Join(dir, "api.yaml"), "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	d := daemontest.StartConfig(t, daemon.Config{ConfigPath: dir})
	code, body := d.Get(t, "/policies")
	if code != http.StatusOK {
		t.Fatalf("/policies: %d", code)
	}
	var got struct {
		Config   string    `json:"config"`
		LoadedAt time.Time `json:"loaded_at"`
		Domains  []struct {
			Domain, Source string
			Descriptors    []struct {
				Key        string
				RateLimits []struct{ Name string } `json:"rate_limits"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if got.Config != dir || time.Since(got.LoadedAt) > time.Hour || len(got.Domains) != 2 {
		t.Fatalf("got %+v", got)
	}
	for i, want := range []struct{ domain, source, firstKey string }{
		{"api", filepath.Join(dir, "api.yaml"), "user"},
		{"shop", filepath.Join(dir, "shop.yaml"), "changed"},
	} {
		dom := got.Domains[i]
		if dom.Domain != want.domain || dom.Source != want.source || dom.Descriptors[0].Key != want.firstKey {
			t.Errorf("domain %d: %+v, want %+v", i, dom, want)
		}
	}
}

func TestPprofFlag(t *testing.T) {
	for _, on := range []bool{true, false} {
		d := daemontest.StartConfig(t, daemon.Config{Pprof: on})
		code, _ := d.Get(t, "/debug/pprof/")
		if want := map[bool]int{true: 200, false: 404}[on]; code != want {
			t.Errorf("pprof %v: /debug/pprof/ %d, want %d", on, code, want)
		}
	}
}

// TestHealthTransitions: SERVING once started; on shutdown NOT_SERVING at
// once (gRPC health, its Watch stream and /readyz), while decisions go on
// for the shutdown delay; then calls are refused.
func TestHealthTransitions(t *testing.T) {
	d := daemontest.StartConfig(t, daemon.Config{ShutdownDelay: time.Hour})
	client, conn := dial(t, d)
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	services := []string{"", "ratelimit.v1.RateLimitService"}
	for _, s := range services {
		if got := check(s); got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%q: %v before shutdown", s, got)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := d.Get(t, p); code != 200 {
			t.Fatalf("%s: %d before shutdown", p, code)
		}
	}
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", r, err)
	}

	stop, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		d.Shutdown(stop)
		close(stopped)
	}()
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch after shutdown began: %v %v, want NOT_SERVING", r, err)
	}
	for _, s := range services {
		if got := check(s); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("%q: %v while draining, want NOT_SERVING", s, got)
		}
	}
	if code, _ := d.Get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d, want 503", code)
	}
	if code, _ := d.Get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while draining: %d, want 200 (alive)", code)
	}
	// During the delay, calls are still decided.
	if r, err := client.ShouldRateLimit(ctx, req("default", desc("generic_key", "global"))); err != nil || r.OverallCode != rl.Code_CODE_OK {
		t.Fatalf("a call during the shutdown delay: %v %v", r, err)
	}

	cancel() // end the delay
	if _, err := watch.Recv(); err == nil {
		t.Fatal("the health watch stream goes on after the daemon stopped taking calls")
	}
	<-stopped
	_, err = client.ShouldRateLimit(ctx, req("default", desc("generic_key", "global")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a call after shutdown: %v, want Unavailable", err)
	}
}

// tlsFiles writes a server certificate (named name) and key signed by ca
// into dir, and ca's certificate, and returns their paths.
func tlsFiles(t *testing.T, dir string, ca *tlstest.CA, name string) tlsconfig.Files {
	t.Helper()
	cert, key := ca.Server(t, name, time.Now().Add(time.Hour).Truncate(time.Second)).Write(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	return tlsconfig.Files{Cert: cert, Key: key, ClientCA: caFile}
}

// tlsCall makes one call over a new connection with creds and returns the
// server certificate's name.
func tlsCall(t *testing.T, d *daemontest.Daemon, creds credentials.TransportCredentials) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var p peer.Peer
	_, err = rl.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req("default", desc("generic_key", "global")), grpc.Peer(&p))
	if err != nil {
		return "", err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("peer auth %T, want TLS", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].Subject.CommonName, nil
}

func clientTLS(roots *x509.CertPool, pair *tlstest.Pair) credentials.TransportCredentials {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if pair != nil {
		c, err := tls.X509KeyPair(pair.Cert, pair.Key)
		if err != nil {
			panic(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return credentials.NewTLS(cfg)
}

func TestMutualTLS(t *testing.T) {
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	alice, mallory := ca.Client(t, "alice"), other.Client(t, "mallory")
	tests := []struct {
		name     string
		mutual   bool
		creds    credentials.TransportCredentials
		accepted bool
	}{
		{"mTLS: a client certificate from the CA", true, clientTLS(ca.Pool(), &alice), true},
		{"mTLS: no client certificate", true, clientTLS(ca.Pool(), nil), false},
		{"mTLS: a client certificate from another CA", true, clientTLS(ca.Pool(), &mallory), false},
		{"mTLS: plaintext", true, insecure.NewCredentials(), false},
		{"TLS: no client certificate", false, clientTLS(ca.Pool(), nil), true},
		{"TLS: plaintext", false, insecure.NewCredentials(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := tlsFiles(t, t.TempDir(), ca, "server")
			if !tt.mutual {
				files.ClientCA = ""
			}
			d := daemontest.StartConfig(t, daemon.Config{TLS: files})
			_, err := tlsCall(t, d, tt.creds)
			if tt.accepted && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.accepted && status.Code(err) != codes.Unavailable {
				t.Fatalf("got %v, want refused (Unavailable)", err)
			}
		})
	}
}

// TestCertificateReload: new certificate files are used by new connections
// once written, without a restart.
func TestCertificateReload(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	alice := ca.Client(t, "alice")
	dir := t.TempDir()
	d := daemontest.StartConfig(t, daemon.Config{TLS: tlsFiles(t, dir, ca, "first")})
	if name, err := tlsCall(t, d, clientTLS(ca.Pool(), &alice)); err != nil || name != "first" {
		t.Fatalf("before: %q %v", name, err)
	}
	second := ca.Server(t, "second", time.Now().Add(2*time.Hour).Truncate(time.Second))
	second.Write(t, dir, "server")
	wait.For(t, "new connections to get the new certificate", func() bool {
		name, err := tlsCall(t, d, clientTLS(ca.Pool(), &alice))
		return err == nil && name == "second"
	})
	if got := scrape(t, d)[`ratelimitd_tls_certificate_expiry_timestamp_seconds`]; got != float64(second.Leaf.NotAfter.Unix()) {
		t.Errorf("certificate expiry %v, want %v", got, second.Leaf.NotAfter.Unix())
	}
	if !strings.Contains(d.Logs(), "TLS certificate reloaded") {
		t.Errorf("no reload logged:\n%s", d.Logs())
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	files := tlsFiles(t, dir, tlstest.NewCA(t, "ca"), "server")
	tests := []struct {
		name    string
		cfg     daemon.Config
		wantErr string
	}{
		{"near-limit ratio above 1", daemon.Config{NearLimitRatio: 1.5}, "near-limit ratio"},
		{"a request bound of 0", daemon.Config{Bounds: engine.Bounds{MaxDescriptors: 0, MaxEntries: 16, MaxKeyBytes: 256, MaxValueBytes: 1024}}, "max descriptors is 0"},
		{"a negative request bound", daemon.Config{Bounds: engine.Bounds{MaxDescriptors: 64, MaxEntries: 16, MaxKeyBytes: 256, MaxValueBytes: -1}}, "max value bytes is -1"},
		{"negative near-limit ratio", daemon.Config{NearLimitRatio: -0.1}, "near-limit ratio"},
		{"TLS key without a certificate", daemon.Config{TLS: tlsconfig.Files{Key: files.Key}}, "--tls-cert and --tls-key go together"},
		{"TLS client CA alone", daemon.Config{TLS: tlsconfig.Files{ClientCA: files.ClientCA}}, "--tls-cert and --tls-key go together"},
		{"TLS certificate that does not exist", daemon.Config{TLS: tlsconfig.Files{Cert: filepath.Join(dir, "none.crt"), Key: files.Key}}, "none.crt"},
		{"policy that does not exist", daemon.Config{ConfigPath: filepath.Join(dir, "none.yaml")}, "none.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.GRPCAddr, tt.cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
			tt.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			d, err := daemon.Start(tt.cfg)
			if err == nil {
				d.Shutdown(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestFailedStartReleasesWhatItOpened: when a late step of Start fails
// (the HTTP address is taken), what the earlier steps opened is closed
// again: the gRPC address can be bound at once.
func TestFailedStartReleasesWhatItOpened(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := free.Addr().String()
	free.Close()

	_, err = daemon.Start(daemon.Config{
		GRPCAddr: grpcAddr, HTTPAddr: taken.Addr().String(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil || !strings.Contains(err.Error(), "http listener") {
		t.Fatalf("Start with the HTTP address taken: %v; want an http listener error", err)
	}
	l, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("the failed Start still holds the gRPC address: %v", err)
	}
	l.Close()
}

// TestShutdownFinishesCallsInFlight holds one call inside the server,
// shuts the daemon down, and checks that new calls are refused while the
// held call is still answered with its decision once it is let go, and
// that only then does Shutdown return.
func TestShutdownFinishesCallsInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*rl.ShouldRateLimitRequest); ok && r.GetDomain() == "hold" {
			close(entered)
			<-release
		}
		return next(ctx, req)
	}
	d := daemontest.StartConfig(t, daemon.Config{ShutdownGrace: time.Minute, UnaryInterceptors: []grpc.UnaryServerInterceptor{hold}})
	client, _ := dial(t, d)
	call := func(domain string) (*rl.ShouldRateLimitResponse, error) {
		return client.ShouldRateLimit(context.Background(), &rl.ShouldRateLimitRequest{Domain: domain,
			Descriptors: []*rl.Descriptor{{Entries: []*rl.Entry{{Key: "path", Value: "/"}}}}})
	}

	held := make(chan error, 1)
	go func() {
		r, err := call("hold")
		if err == nil && r.GetOverallCode() != rl.Code_CODE_OK {
			err = fmt.Errorf("held call decided %v", r.GetOverallCode())
		}
		held <- err
	}()
	<-entered
	stopped := make(chan struct{})
	go func() {
		d.Shutdown(context.Background())
		close(stopped)
	}()

	// New calls are refused once the drain has begun.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := call("default")
		if status.Code(err) == codes.Unavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new calls still answered while draining (last: %v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-stopped:
		t.Fatal("Shutdown returned with a call still in flight")
	default:
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the call in flight was not answered: %v", err)
	}
	<-stopped
}
