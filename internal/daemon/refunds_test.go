package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// The attack of refunds: a caller that may charge a bucket of 1 a day
// charges it, gives the charge back, and charges again — 20 times.
const (
	dailyDomain = `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1}
`
	gatewayToken = "gateway-0123456789abcdefghij"
)

// refundRounds makes rounds of one charge and one refund of tenant in
// domain llm, over Envoy v3 (is_negative_hits) or ratelimit.v1
// (OPERATION_REFUND), as the caller of ctx. It returns how many charges
// were admitted, and the error of every refund that failed.
func refundRounds(t *testing.T, ctx context.Context, conn *grpc.ClientConn, api, tenant string, rounds int) (admitted int, refused []error) {
	t.Helper()
	envoy, v1 := rlsv3.NewRateLimitServiceClient(conn), rl.NewRateLimitServiceClient(conn)
	envoyReq := func(negative bool) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries:        []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}},
			IsNegativeHits: negative,
		}}}
	}
	v1Req := func(op rl.Operation) *rl.ShouldRateLimitRequest {
		d := desc("tenant", tenant)
		d.Operation = op
		return req("llm", d)
	}
	for range rounds {
		var (
			ok  bool
			err error
		)
		switch api {
		case "envoy":
			var resp *rlsv3.RateLimitResponse
			if resp, err = envoy.ShouldRateLimit(ctx, envoyReq(false)); err == nil {
				ok = resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
				_, err = envoy.ShouldRateLimit(ctx, envoyReq(true))
			}
		case "v1":
			var resp *rl.ShouldRateLimitResponse
			if resp, err = v1.ShouldRateLimit(ctx, v1Req(rl.Operation_OPERATION_UNSPECIFIED)); err == nil {
				ok = resp.GetOverallCode() == rl.Code_CODE_OK
				_, err = v1.ShouldRateLimit(ctx, v1Req(rl.Operation_OPERATION_REFUND))
			}
		}
		if ok {
			admitted++
		}
		if err != nil {
			refused = append(refused, err)
		}
	}
	return admitted, refused
}

// postJSON posts body to the daemon's HTTP port at path, with the bearer
// token when given, and returns the status and the body's "code".
func postJSON(t *testing.T, d *daemontest.Daemon, path, token, body string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, "http://"+d.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e struct{ Code, Message string }
	json.Unmarshal(data, &e)
	return resp.StatusCode, e.Code
}

// The HTTP equivalents of a refund, on each decision path.
var httpRefunds = []struct{ path, body string }{
	{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", `{"domain": "llm", "descriptors": [{"entries": [{"key": "tenant", "value": "http"}], "isNegativeHits": true}]}`},
	{"/json", `{"domain": "llm", "descriptors": [{"entries": [{"key": "tenant", "value": "http"}], "is_negative_hits": true}]}`},
	{"/ratelimit.v1.RateLimitService/ShouldRateLimit", `{"domain": "llm", "descriptors": [{"entries": [{"key": "tenant", "value": "http"}], "operation": "OPERATION_REFUND"}]}`},
}

// TestRefundBypassClosedByAuthz: under an authorization policy that grants
// a gateway charge (as every policy written before refund was a verb
// does), its refunds are refused, so 20 rounds of charge-and-refund over a
// real gRPC connection admit 1 charge of a limit of 1 a day, not 20; over
// HTTP too. A client granted [charge, refund] — Envoy's
// apply_on_stream_done with is_negative_hits — refunds as before.
func TestRefundBypassClosedByAuthz(t *testing.T) {
	dir := t.TempDir()
	authzPath := filepath.Join(dir, "authz.yaml")
	writeFile(t, authzPath, `
clients:
  - name: gateway
    match: [{tokens: gateway.tokens}]
    grants: [{domains: [llm], access: charge}]
`)
	writeFile(t, filepath.Join(dir, "gateway.tokens"), gatewayToken+"\n")
	policy := filepath.Join(t.TempDir(), "llm.yaml")
	writeFile(t, policy, dailyDomain)
	d := daemontest.StartConfig(t, daemon.Config{ConfigPath: policy, AuthzPolicy: authzPath})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+gatewayToken)

	for _, api := range []string{"envoy", "v1"} {
		admitted, refused := refundRounds(t, ctx, d.Dial(t), api, api, 20)
		if admitted != 1 || len(refused) != 20 {
			t.Errorf("%s: %d of 20 charges admitted, %d refunds refused; want 1 and 20", api, admitted, len(refused))
		}
		for _, err := range refused[:min(1, len(refused))] {
			wantRefused(t, err, codes.PermissionDenied, `client "gateway" may not refund in domain "llm" (granted: check+charge)`)
		}
	}
	for _, h := range httpRefunds {
		if code, name := postJSON(t, d, h.path, gatewayToken, h.body); code != http.StatusForbidden || name != "permission_denied" {
			t.Errorf("POST %s, a refund: %d %q, want 403 permission_denied", h.path, code, name)
		}
	}
	if got := scrape(t, d)[`ratelimitd_authz_denied_total{reason="refund"}`]; got != 43 {
		t.Errorf(`ratelimitd_authz_denied_total{reason="refund"} = %v, want 43`, got)
	}

	// Granting refund: Envoy's recipe (a charge, then the stream-done
	// refund) works again, and so does the bypass — for this client alone.
	writeFile(t, authzPath, `
clients:
  - name: gateway
    match: [{tokens: gateway.tokens}]
    grants: [{domains: [llm], access: [charge, refund]}]
`)
	if err := d.ReloadAuthz(); err != nil {
		t.Fatal(err)
	}
	if admitted, refused := refundRounds(t, ctx, d.Dial(t), "envoy", "granted", 5); admitted != 5 || len(refused) != 0 {
		t.Errorf("granted refund: %d of 5 charges admitted, refunds refused: %v", admitted, refused)
	}
}

// TestRefundBypassClosedByPolicy: without any authorization policy, a rule
// with refunds: false refuses refunds — PermissionDenied on both gRPC APIs,
// 403 over HTTP — so 20 rounds of charge-and-refund admit 1 charge of 1 a
// day; a rule without the setting takes refunds as before.
func TestRefundBypassClosedByPolicy(t *testing.T) {
	d := daemontest.Start(t, `
domain: llm
descriptors:
  - key: tenant
    refunds: false
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: open
    rate_limit: {unit: day, requests_per_unit: 1}
`)
	conn := d.Dial(t)
	for _, api := range []string{"envoy", "v1"} {
		admitted, refused := refundRounds(t, context.Background(), conn, api, api, 20)
		if admitted != 1 || len(refused) != 20 {
			t.Errorf("%s: %d of 20 charges admitted, %d refunds refused; want 1 and 20", api, admitted, len(refused))
		}
		for _, err := range refused[:min(1, len(refused))] {
			wantRefused(t, err, codes.PermissionDenied, "descriptors[0]: asks a refund of rule llm.tenant, which takes no refunds (refunds: false in its policy)")
		}
	}
	for _, h := range httpRefunds {
		if code, name := postJSON(t, d, h.path, "", h.body); code != http.StatusForbidden || name != "permission_denied" {
			t.Errorf("POST %s, a refund: %d %q, want 403 permission_denied", h.path, code, name)
		}
	}
	// A refund beside a charge is refused as a whole: the charge is not
	// applied either.
	c := rl.NewRateLimitServiceClient(conn)
	refund := desc("tenant", "whole")
	refund.Operation = rl.Operation_OPERATION_REFUND
	if _, err := c.ShouldRateLimit(context.Background(), req("llm", desc("open", "whole"), refund)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a charge beside a refused refund: %v, want PermissionDenied", err)
	}
	if resp, err := c.ShouldRateLimit(context.Background(), req("llm", desc("open", "whole"))); err != nil || resp.GetOverallCode() != rl.Code_CODE_OK {
		t.Fatalf("the refused request charged its other descriptor: %v, %v", resp, err)
	}
	// The rule without refunds: false takes them.
	open := desc("open", "whole")
	open.Operation = rl.Operation_OPERATION_REFUND
	if _, err := c.ShouldRateLimit(context.Background(), req("llm", open)); err != nil {
		t.Fatalf("a refund of a rule that takes them: %v", err)
	}
	if resp, err := c.ShouldRateLimit(context.Background(), req("llm", desc("open", "whole"))); err != nil || resp.GetOverallCode() != rl.Code_CODE_OK {
		t.Fatalf("after its refund the bucket should admit again: %v, %v", resp, err)
	}
}
