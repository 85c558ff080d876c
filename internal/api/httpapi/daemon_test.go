package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics/metricstest"
)

func post(t *testing.T, url, contentType, body string) answer {
	t.Helper()
	resp, err := http.Post(url, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

// TestDaemon: a real daemon serves the JSON API on its HTTP port, from the
// same engine and buckets as gRPC, counted in the same metrics.
func TestDaemon(t *testing.T) {
	d := daemontest.Start(t, policy)
	base := "http://" + d.HTTPAddr()
	grpcClient := ratelimitv1.NewRateLimitServiceClient(d.Dial(t))

	// The first call over HTTP, the second over gRPC: one bucket.
	overHTTP := post(t, base+v1Path, jsonType, orders)
	var req ratelimitv1.ShouldRateLimitRequest
	if err := protojson.Unmarshal([]byte(orders), &req); err != nil {
		t.Fatal(err)
	}
	overGRPC, err := grpcClient.ShouldRateLimit(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if overGRPC.GetStatuses()[0].GetRemaining() != 0 {
		t.Errorf("gRPC after HTTP: remaining %d, want 0 (one bucket of 2)", overGRPC.GetStatuses()[0].GetRemaining())
	}
	// The HTTP answer is the gRPC message in JSON.
	var fromHTTP ratelimitv1.ShouldRateLimitResponse
	if err := protojson.Unmarshal([]byte(overHTTP.body), &fromHTTP); err != nil {
		t.Fatalf("HTTP body: %v\n%s", err, overHTTP.body)
	}
	if fromHTTP.GetStatuses()[0].GetRemaining() != 1 || fromHTTP.GetOverallCode() != ratelimitv1.Code_CODE_OK {
		t.Errorf("HTTP answer %s, want CODE_OK with 1 remaining", overHTTP.body)
	}
	check(t, "json over limit", post(t, base+"/json", "application/json", orders), 429,
		`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"orders","requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"60s"}]}`)
	check(t, "bounds of the daemon", post(t, base+v3Path, jsonType, `{"domain":"`+strings.Repeat("d", 257)+`","descriptors":[{"entries":[{"key":"k"}]}]}`), 400,
		`{"code":"invalid_argument","message":"domain: is 257 bytes; the limit is 256"}`)

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := metricstest.Samples(t, resp.Body)
	const v1 = `grpc_method="ShouldRateLimit",grpc_service="ratelimit.v1.RateLimitService",grpc_type="unary"`
	const v3 = `grpc_method="ShouldRateLimit",grpc_service="envoy.service.ratelimit.v3.RateLimitService",grpc_type="unary"`
	for series, v := range map[string]float64{
		`ratelimitd_grpc_server_handled_total{grpc_code="OK",` + v1 + `}`:              2, // one over HTTP, one over gRPC
		`ratelimitd_grpc_server_handled_total{grpc_code="OK",` + v3 + `}`:              1,
		`ratelimitd_grpc_server_handled_total{grpc_code="InvalidArgument",` + v3 + `}`: 1,
		`ratelimitd_rule_hits_total{descriptor="",domain="shop",rule="path_/orders"}`:  3,
	} {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
}

// TestDaemonDraining: once the daemon refuses new gRPC calls, its HTTP
// server, still open while gRPC calls in flight finish, refuses decision
// calls too (503, unavailable).
func TestDaemonDraining(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*ratelimitv1.ShouldRateLimitRequest); ok && r.GetDomain() == "hold" {
			close(held)
			<-release
		}
		return handler(ctx, req)
	}
	d := daemontest.Start(t, policy, func(c *daemon.Config) { c.UnaryInterceptors = []grpc.UnaryServerInterceptor{hold} })
	base := "http://" + d.HTTPAddr()
	client := ratelimitv1.NewRateLimitServiceClient(d.Dial(t))
	inFlight := make(chan error, 1)
	go func() {
		_, err := client.ShouldRateLimit(context.Background(), &ratelimitv1.ShouldRateLimitRequest{
			Domain: "hold", Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{{Key: "k"}}}}})
		inFlight <- err
	}()
	<-held
	check(t, "before", post(t, base+v1Path, jsonType, orders), 200, `{"overallCode":"CODE_OK","statuses":[
		{"code":"CODE_OK","matched":true,"remaining":"1","resetAfter":"60s","shadow":false,"overdrew":false,"debt":"0","chargedAt":"2023-11-14T22:14:00Z",
		 "rule":{"name":"orders","algorithm":"ALGORITHM_FIXED_WINDOW","requests":2,"period":"60s","burst":0,"unlimited":false}}],"mostRestrictive":1}`)
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	// Poll until the drain begins; the gRPC call held in flight keeps the
	// HTTP server open meanwhile.
	var got answer
	for range 1000 {
		if got = post(t, base+v1Path, jsonType, orders); got.status != http.StatusOK {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	check(t, "while draining", got, 503, `{"code":"unavailable","message":"ratelimitd is shutting down"}`)
	close(release)
	if err := <-inFlight; err != nil {
		t.Errorf("the gRPC call in flight: %v", err)
	}
	<-stopped
}

// TestDaemonAuthorization: with --authz-policy, HTTP decision calls are
// authorized as gRPC ones are: a bearer token in the Authorization header
// identifies the caller (the HTTP port has no TLS, so no certificate does).
func TestDaemonAuthorization(t *testing.T) {
	dir := t.TempDir()
	const token = "batch-0123456789abcdefghij"
	writeFile(t, filepath.Join(dir, "batch.tokens"), token+"\n")
	writeFile(t, filepath.Join(dir, "authz.yaml"), `
clients:
  - name: batch
    match: [{tokens: batch.tokens}]
    grants: [{domains: [shop], access: charge}]
`)
	d := daemontest.Start(t, policy, func(c *daemon.Config) { c.AuthzPolicy = filepath.Join(dir, "authz.yaml") })
	url := "http://" + d.HTTPAddr() + v1Path
	call := func(authorization, body string) answer {
		req, err := http.NewRequest("POST", url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", jsonType)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
	}
	if got := call("", orders); got.status != 401 || !strings.Contains(got.body, `"code":"unauthenticated"`) {
		t.Errorf("no token: HTTP %d %s, want 401 unauthenticated", got.status, got.body)
	}
	if got := call("Bearer batch-0123456789abcdefghiX", orders); got.status != 401 || strings.Contains(got.body, "batch-") {
		t.Errorf("wrong token: HTTP %d %s, want 401 without the token", got.status, got.body)
	}
	if got := call("Bearer "+token, `{"domain":"other","descriptors":[{"entries":[{"key":"k"}]}]}`); got.status != 403 || !strings.Contains(got.body, `"code":"permission_denied"`) {
		t.Errorf("another domain: HTTP %d %s, want 403 permission_denied", got.status, got.body)
	}
	if got := call("Bearer "+token, orders); got.status != 200 || !strings.Contains(got.body, `"remaining":"1"`) {
		t.Errorf("with the token: HTTP %d %s, want 200 with 1 remaining", got.status, got.body)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
