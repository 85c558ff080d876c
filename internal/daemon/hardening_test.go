package daemon_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcdecode/grpcdecodetest"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig/tlstest"
)

// TestCertificateExpiryWarning: an expired certificate, or one expiring
// within 7 days, is logged as a warning at start and at reload, and the
// expiry metric says when; a certificate valid for longer is not warned of.
func TestCertificateExpiryWarning(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	expired := ca.Server(t, "expired", time.Now().Add(-time.Hour).Truncate(time.Second))
	cert, key := expired.Write(t, dir, "server")
	files := tlsFiles(t, t.TempDir(), ca, "unused")
	files.Cert, files.Key = cert, key
	d := daemontest.StartConfig(t, daemon.Config{TLS: files})
	if logs := d.Logs(); !strings.Contains(logs, `level=WARN msg="TLS certificate expired 1h0m0s ago"`) {
		t.Errorf("no warning of the expired certificate at start:\n%s", logs)
	}
	if got := scrape(t, d)[`ratelimitd_tls_certificate_expiry_timestamp_seconds`]; got != float64(expired.Leaf.NotAfter.Unix()) {
		t.Errorf("certificate expiry %v, want %v", got, expired.Leaf.NotAfter.Unix())
	}

	soon := ca.Server(t, "soon", time.Now().Add(72*time.Hour).Truncate(time.Second))
	soon.Write(t, dir, "server")
	wait.For(t, "the reload to warn of the certificate expiring soon", func() bool {
		return strings.Contains(d.Logs(), `level=WARN msg="TLS certificate expires in 7`) // 71h59m or 72h0m
	})
	if got := scrape(t, d)[`ratelimitd_tls_certificate_expiry_timestamp_seconds`]; got != float64(soon.Leaf.NotAfter.Unix()) {
		t.Errorf("certificate expiry %v, want %v", got, soon.Leaf.NotAfter.Unix())
	}

	fine := daemontest.StartConfig(t, daemon.Config{TLS: func() tlsconfig.Files {
		f := tlsFiles(t, t.TempDir(), ca, "fine")
		c, k := ca.Server(t, "fine", time.Now().Add(30*24*time.Hour).Truncate(time.Second)).Write(t, t.TempDir(), "server")
		f.Cert, f.Key = c, k
		return f
	}()})
	if logs := fine.Logs(); strings.Contains(logs, "TLS certificate") {
		t.Errorf("a certificate valid for 30 days was warned of:\n%s", logs)
	}
}

// TestOversizePolicyRejectedOnReload: a policy file over --max-policy-bytes
// is rejected by the reload, with a message naming the limit, and the
// previous policy goes on serving.
func TestOversizePolicyRejectedOnReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.yaml")
	writeFile(t, path, policyV1)
	d := daemontest.StartConfig(t, daemon.Config{ConfigPath: path})
	client, _ := dial(t, d)

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("# padding\n")
	if err := f.Truncate(3 << 20); err != nil { // over the default 2 MiB
		t.Fatal(err)
	}
	f.Close()
	err = d.Reload()
	if err == nil || !strings.Contains(err.Error(), "3145728 bytes, more than the limit of 2097152 (--max-policy-bytes)") {
		t.Fatalf("Reload of an oversize policy: %v", err)
	}
	r, err := client.ShouldRateLimit(context.Background(), req("shop", desc("kept", "k")))
	if err != nil || !r.Statuses[0].Matched {
		t.Fatalf("after the rejected reload: %v %v, want the previous policy to match", r, err)
	}
	if got := scrape(t, d)[`ratelimitd_policy_reloads_total{result="failure"}`]; got < 1 {
		t.Errorf("the rejected reload was not counted")
	}
}

// TestDomainWithoutRulesWarned: a domain that has no rate limit admits
// every request; loading it logs a warning naming it.
func TestDomainWithoutRulesWarned(t *testing.T) {
	d := daemontest.Start(t, "domain: open\ndescriptors: []\n")
	if logs := d.Logs(); !strings.Contains(logs, `level=WARN msg="policy domain has no rate limits: it admits every request" domain=open`) {
		t.Errorf("no warning:\n%s", logs)
	}
	client, _ := dial(t, d)
	r, err := client.ShouldRateLimit(context.Background(), req("open", desc("anything", "x")))
	if err != nil || r.OverallCode != rl.Code_CODE_OK || r.Statuses[0].Matched {
		t.Errorf("%v %v: want admitted, unmatched", r, err)
	}
}

// TestDetailedSeriesCapped: over gRPC, a detailed_metric rule makes at
// most --max-detailed-series series; the rest count on _overflow_.
func TestDetailedSeriesCappedInDaemon(t *testing.T) {
	d := daemontest.Start(t, `
domain: shop
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`, func(c *daemon.Config) { c.MaxDetailedSeries = 2 })
	client, _ := dial(t, d)
	for _, u := range []string{"a", "b", "c", "d", "a"} {
		if _, err := client.ShouldRateLimit(context.Background(), req("shop", desc("user", u))); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]float64{}
	for k, v := range scrape(t, d) {
		if strings.HasPrefix(k, "ratelimitd_rule_hits_total{") {
			got[k] = v
		}
	}
	series := func(descriptor string) string {
		return `ratelimitd_rule_hits_total{descriptor="` + descriptor + `",domain="shop",rule="user"}`
	}
	want := map[string]float64{series("user_a"): 2, series("user_b"): 1, series("_overflow_"): 2}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestUndecodableRequests: over a real connection, on both APIs, bytes
// that do not decode as the request — malformed wire data, a string that is
// not UTF-8 — are InvalidArgument naming the problem, and counted in the
// gRPC metrics under that code.
func TestUndecodableRequests(t *testing.T) {
	d := daemontest.Start(t, "")
	conn := d.Dial(t)
	const (
		v1    = "/ratelimit.v1.RateLimitService/ShouldRateLimit"
		envoy = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	)
	v1Msg := req("default", desc("path", "/orders", "user", "@@"))
	envoyMsg := &rlsv3.RateLimitRequest{Domain: "default", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "@@", Value: "/orders"}}}}}
	tests := []struct {
		name, method string
		body         []byte
		want         string
	}{
		{"v1: a value not UTF-8", v1, grpcdecodetest.NotUTF8(t, v1Msg, "@@"),
			"request ratelimit.v1.ShouldRateLimitRequest: descriptors[0].entries[1].value: invalid UTF-8"},
		{"v1: truncated", v1, []byte{0x0a, 0x10, 'd'},
			"request ratelimit.v1.ShouldRateLimitRequest: cannot decode: proto:"},
		{"v3: a key not UTF-8", envoy, grpcdecodetest.NotUTF8(t, envoyMsg, "@@"),
			"request envoy.service.ratelimit.v3.RateLimitRequest: descriptors[0].entries[0].key: invalid UTF-8"},
		{"v3: a varint that never ends", envoy, bytes.Repeat([]byte{0x80}, 12),
			"request envoy.service.ratelimit.v3.RateLimitRequest: cannot decode: proto:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out []byte
			err := conn.Invoke(context.Background(), tt.method, tt.body, &out, grpc.ForceCodecV2(grpcdecodetest.Raw{}))
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.want) {
				t.Errorf("got %v %q, want InvalidArgument %q", st.Code(), st.Message(), tt.want)
			}
		})
	}
	got := scrape(t, d)
	for service, want := range map[string]float64{"ratelimit.v1.RateLimitService": 2, "envoy.service.ratelimit.v3.RateLimitService": 2} {
		series := `ratelimitd_grpc_server_handled_total{grpc_code="InvalidArgument",grpc_method="ShouldRateLimit",grpc_service="` + service + `",grpc_type="unary"}`
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}

	// The same connection still decides well-formed requests.
	var out []byte
	ok, _ := proto.Marshal(req("default", desc("path", "/orders")))
	if err := conn.Invoke(context.Background(), v1, ok, &out, grpc.ForceCodecV2(grpcdecodetest.Raw{})); err != nil {
		t.Errorf("a valid request after the malformed ones: %v", err)
	}
}
