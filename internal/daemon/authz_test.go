package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig/tlstest"
)

// Two tenants' domains, each a small token bucket per user: 3 at once.
const (
	shopDomain = `
domain: shop
descriptors:
  - key: user
    rate_limit: {name: per-user, algorithm: token_bucket, unit: minute, requests_per_unit: 3}
`
	billingDomain = `
domain: billing
descriptors:
  - key: user
    rate_limit: {name: per-user, algorithm: token_bucket, unit: minute, requests_per_unit: 3}
`
	tenantsAuthz = `
clients:
  - name: shop
    match: [{uri: "spiffe://example.org/ns/shop/sa/api"}]
    grants: [{domains: [shop], access: charge}]
  - name: billing
    match: [{dns: billing.internal.example}]
    grants: [{domains: [billing], access: charge}]
  - name: dashboard
    match: [{common_name: dashboard}]
    grants: [{domains: ["*"], access: peek}]
  - name: batch
    match: [{tokens: batch.tokens}]
    grants: [{domains: [billing], access: charge}]
`
	batchToken = "batch-0123456789abcdefghij"
)

// tenants is a daemon serving the two tenants' domains over mutual TLS
// under tenantsAuthz, and its files.
type tenants struct {
	d     *daemontest.Daemon
	dir   string // the authorization policy and its token file
	ca    *tlstest.CA
	authz string // the authorization policy's path
	certs map[string]credentials.TransportCredentials
}

func startTenants(t *testing.T) *tenants {
	t.Helper()
	policies := t.TempDir()
	writeFile(t, filepath.Join(policies, "shop.yaml"), shopDomain)
	writeFile(t, filepath.Join(policies, "billing.yaml"), billingDomain)
	dir := t.TempDir()
	authzPath := filepath.Join(dir, "authz.yaml")
	writeFile(t, authzPath, tenantsAuthz)
	writeFile(t, filepath.Join(dir, "batch.tokens"), "# the nightly batch job\n"+batchToken+"\n")

	ca := tlstest.NewCA(t, "tenants-ca")
	files := tlsFiles(t, t.TempDir(), ca, "ratelimitd")
	pairs := map[string]tlstest.Pair{
		"shop":      ca.ClientSAN(t, "shop-api-7f9c", nil, "spiffe://example.org/ns/shop/sa/api"),
		"billing":   ca.ClientSAN(t, "billing-1", []string{"billing.internal.example"}),
		"dashboard": ca.Client(t, "dashboard"),
		"stranger":  ca.ClientSAN(t, "stranger", []string{"shop.internal.example"}, "spiffe://example.org/ns/shop/sa/other"),
	}
	tn := &tenants{
		d:     daemontest.StartConfig(t, daemon.Config{ConfigPath: policies, TLS: files, AuthzPolicy: authzPath}),
		dir:   dir,
		ca:    ca,
		authz: authzPath,
		certs: map[string]credentials.TransportCredentials{},
	}
	for name, p := range pairs {
		tn.certs[name] = clientTLS(ca.Pool(), &p)
	}
	return tn
}

// conn returns a connection presenting the named client certificate,
// closed when the test ends.
func (tn *tenants) conn(t *testing.T, client string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(tn.d.GRPCAddr(), grpc.WithTransportCredentials(tn.certs[client]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// v1 makes a ratelimit.v1 call as client (with the token, if any) and
// returns the remaining count of its one descriptor.
func (tn *tenants) v1(t *testing.T, client, token string, r *rl.ShouldRateLimitRequest) (uint64, error) {
	t.Helper()
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	resp, err := rl.NewRateLimitServiceClient(tn.conn(t, client)).ShouldRateLimit(ctx, r)
	if err != nil {
		return 0, err
	}
	return resp.GetStatuses()[0].GetRemaining(), nil
}

func user(name string) *rl.Descriptor { return desc("user", name) }

func wantRefused(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("got %v, want %v saying %q", err, code, msg)
	}
}

// TestAuthzTenants: over real mutual TLS, each tenant charges its own
// domain and cannot touch the other's — not even to peek — and a refused
// call charges nothing; a peek-only client peeks everywhere and charges
// nowhere; a grant of charge refunds nothing; a bearer token identifies a
// caller whose certificate does not.
func TestAuthzTenants(t *testing.T) {
	tn := startTenants(t)
	charge := func(domain, u string) *rl.ShouldRateLimitRequest { return req(domain, user(u)) }
	peekAt := func(domain, u string) *rl.ShouldRateLimitRequest { return req(domain, peek(user(u))) }
	refund := func(domain, u string) *rl.ShouldRateLimitRequest {
		d := user(u)
		d.Operation = rl.Operation_OPERATION_REFUND
		return req(domain, d)
	}

	steps := []struct {
		name, client, token string
		req                 *rl.ShouldRateLimitRequest
		code                codes.Code
		msg                 string // in the refusal
		remaining           uint64 // when allowed
	}{
		{"shop charges its own domain", "shop", "", charge("shop", "alice"), codes.OK, "", 2},
		{"but may not refund there: charge is not refund", "shop", "", refund("shop", "alice"), codes.PermissionDenied, `client "shop" may not refund in domain "shop" (granted: check+charge)`, 0},
		{"shop cannot charge billing", "shop", "", charge("billing", "alice"), codes.PermissionDenied, `client "shop" may not call domain "billing"`, 0},
		{"nor drain it", "shop", "", &rl.ShouldRateLimitRequest{Domain: "billing", Hits: 800, Descriptors: []*rl.Descriptor{user("alice")}}, codes.PermissionDenied, `domain "billing"`, 0},
		{"nor peek at it", "shop", "", peekAt("billing", "alice"), codes.PermissionDenied, `client "shop" may not call domain "billing"`, 0},
		{"billing's bucket is untouched", "billing", "", charge("billing", "alice"), codes.OK, "", 2},
		{"billing cannot charge shop", "billing", "", charge("shop", "alice"), codes.PermissionDenied, `client "billing" may not call domain "shop"`, 0},
		{"the dashboard peeks at shop", "dashboard", "", peekAt("shop", "alice"), codes.OK, "", 2},
		{"and at billing", "dashboard", "", peekAt("billing", "alice"), codes.OK, "", 2},
		{"but charges neither", "dashboard", "", charge("shop", "alice"), codes.PermissionDenied, `client "dashboard" may not charge in domain "shop"`, 0},
		{"a charge beside a peek is a charge", "dashboard", "", req("shop", peek(user("alice")), user("bob")), codes.PermissionDenied, "may not charge", 0},
		{"its peeks charged nothing", "shop", "", charge("shop", "alice"), codes.OK, "", 1},
		{"a certificate that matches no client", "stranger", "", peekAt("shop", "alice"), codes.Unauthenticated, "matches no client", 0},
		{"a token identifies it", "stranger", batchToken, charge("billing", "alice"), codes.OK, "", 1},
		{"with the token's grants only", "stranger", batchToken, charge("shop", "alice"), codes.PermissionDenied, `client "batch" may not call domain "shop"`, 0},
		{"a wrong token is refused, whatever the certificate", "shop", "batch-0123456789abcdefghiX", charge("shop", "alice"), codes.Unauthenticated, "bearer token is not valid", 0},
	}
	for _, s := range steps {
		remaining, err := tn.v1(t, s.client, s.token, s.req)
		if s.code == codes.OK {
			if err != nil || remaining != s.remaining {
				t.Fatalf("%s: remaining %d, %v; want %d", s.name, remaining, err, s.remaining)
			}
			continue
		}
		if status.Code(err) != s.code || !strings.Contains(status.Convert(err).Message(), s.msg) {
			t.Fatalf("%s: got %v, want %v saying %q", s.name, err, s.code, s.msg)
		}
		if strings.Contains(err.Error(), "0123456789abcdefghi") {
			t.Fatalf("%s: the refusal shows the token: %v", s.name, err)
		}
	}

	m := scrape(t, tn.d)
	for series, want := range map[string]float64{
		`ratelimitd_authz_denied_total{reason="domain"}`:         5,
		`ratelimitd_authz_denied_total{reason="peek_only"}`:      2,
		`ratelimitd_authz_denied_total{reason="refund"}`:         1,
		`ratelimitd_authz_denied_total{reason="unknown_caller"}`: 1,
		`ratelimitd_authz_denied_total{reason="bad_token"}`:      1,
		`ratelimitd_authz_denied_total{reason="no_credentials"}`: 0,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	var handled float64
	for series, v := range m {
		if strings.HasPrefix(series, "ratelimitd_grpc_server_handled_total{") && strings.Contains(series, `grpc_code="PermissionDenied"`) {
			handled += v
		}
	}
	if handled != 8 {
		t.Errorf("gRPC metrics count %v PermissionDenied calls, want 8", handled)
	}
	if logs := tn.d.Logs(); strings.Contains(logs, "0123456789abcdefghi") {
		t.Errorf("the logs show a token:\n%s", logs)
	}
}

// TestAuthzEnvoy: Envoy v3 calls are authorized by the same policy; a call
// whose every descriptor carries hits_addend 0 is a peek, Envoy's default
// (no hits_addend anywhere) a charge.
func TestAuthzEnvoy(t *testing.T) {
	tn := startTenants(t)
	envoyReq := func(domain string, addend *uint64) *rlsv3.RateLimitRequest {
		d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}
		if addend != nil {
			d.HitsAddend = wrapperspb.UInt64(*addend)
		}
		return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}}
	}
	zero, two := uint64(0), uint64(2)
	call := func(client string, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		return rlsv3.NewRateLimitServiceClient(tn.conn(t, client)).ShouldRateLimit(context.Background(), r)
	}
	resp, err := call("shop", envoyReq("shop", nil))
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("shop charging shop: %v, %v", resp, err)
	}
	_, err = call("shop", envoyReq("billing", nil))
	wantRefused(t, err, codes.PermissionDenied, `client "shop" may not call domain "billing"`)
	resp, err = call("dashboard", envoyReq("shop", &zero))
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("the dashboard peeking at shop: %v, %v", resp, err)
	}
	_, err = call("dashboard", envoyReq("shop", nil))
	wantRefused(t, err, codes.PermissionDenied, `client "dashboard" may not charge in domain "shop"`)
	_, err = call("dashboard", envoyReq("shop", &two))
	wantRefused(t, err, codes.PermissionDenied, "may not charge")
	_, err = call("stranger", envoyReq("shop", &zero))
	wantRefused(t, err, codes.Unauthenticated, "matches no client")
}

// TestAuthzOpenServices: health and reflection answer callers the policy
// does not know; without TLS, a caller with no credentials is
// Unauthenticated and a bearer token identifies it.
func TestAuthzOpenServices(t *testing.T) {
	d := startBillingWithAuthz(t)
	conn := d.Dial(t)

	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}
	stream, err := grpc_reflection_v1.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || len(r.GetListServicesResponse().GetService()) == 0 {
		t.Fatalf("reflection: %v, %v", r, err)
	}
	stream.CloseSend()

	c := rl.NewRateLimitServiceClient(conn)
	_, err = c.ShouldRateLimit(context.Background(), req("billing", user("alice")))
	wantRefused(t, err, codes.Unauthenticated, "no client certificate or bearer token")
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+batchToken)
	if _, err := c.ShouldRateLimit(ctx, req("billing", user("alice"))); err != nil {
		t.Fatalf("with the batch token: %v", err)
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Basic "+batchToken)
	_, err = c.ShouldRateLimit(ctx, req("billing", user("alice")))
	wantRefused(t, err, codes.Unauthenticated, `not "Bearer <token>"`)
	if !strings.Contains(d.Logs(), "bearer tokens over a plaintext gRPC port") || !strings.Contains(d.Logs(), "does not ask for them") {
		t.Errorf("no warnings about plaintext tokens and unseen certificates:\n%s", d.Logs())
	}
}

// TestAuthzReload: the policy and its token files are reloaded when they
// change; a bad policy is rejected and the old one goes on serving.
func TestAuthzReload(t *testing.T) {
	tn := startTenants(t)
	_, err := tn.v1(t, "shop", "", req("billing", peek(user("alice"))))
	wantRefused(t, err, codes.PermissionDenied, `may not call domain "billing"`)

	// Grant shop a peek at billing.
	granting := strings.Replace(tenantsAuthz,
		"grants: [{domains: [shop], access: charge}]",
		"grants: [{domains: [shop], access: charge}, {domains: [billing], access: peek}]", 1)
	tlstest.WriteFile(t, tn.authz, []byte(granting))
	wait.For(t, "the new grant", func() bool {
		_, err := tn.v1(t, "shop", "", req("billing", peek(user("alice"))))
		return err == nil
	})
	_, err = tn.v1(t, "shop", "", req("billing", user("alice")))
	wantRefused(t, err, codes.PermissionDenied, `may not charge in domain "billing"`)

	// A bad policy: rejected, counted, logged; the last good one serves.
	tlstest.WriteFile(t, tn.authz, []byte(tenantsAuthz+"  - name: shop\n    match: [{dns: x}]\n    grants: [{domains: [x], access: everything}]\n"))
	wait.For(t, "the failed reload", func() bool {
		return scrape(t, tn.d)[`ratelimitd_authz_reloads_total{result="failure"}`] == 1
	})
	for _, want := range []string{
		"authorization policy reload failed",
		`authz.yaml:15: clients[4].name: client \"shop\" is already named at line 3`,
		`authz.yaml:17: clients[4].grants[0].access: \"everything\": want check (or peek), charge or refund, or a list of them`,
	} {
		if !strings.Contains(tn.d.Logs(), want) {
			t.Errorf("the logs do not say %s:\n%s", want, tn.d.Logs())
		}
	}
	if _, err := tn.v1(t, "shop", "", req("billing", peek(user("alice")))); err != nil {
		t.Fatalf("after a bad reload, the previous policy should serve: %v", err)
	}

	// The good policy back: the same bytes as the one in force, so no
	// reload is counted. Then a token file change alone: a new token
	// works, a removed one is refused.
	tlstest.WriteFile(t, tn.authz, []byte(granting))
	newToken := "batch-rotated-9876543210zyxw"
	tlstest.WriteFile(t, filepath.Join(tn.dir, "batch.tokens"), []byte(newToken+"\n"))
	wait.For(t, "the rotated token", func() bool {
		_, err := tn.v1(t, "stranger", newToken, req("billing", user("bob")))
		return err == nil
	})
	_, err = tn.v1(t, "stranger", batchToken, req("billing", user("bob")))
	wantRefused(t, err, codes.Unauthenticated, "bearer token is not valid")
	m := scrape(t, tn.d)
	if s, f := m[`ratelimitd_authz_reloads_total{result="success"}`], m[`ratelimitd_authz_reloads_total{result="failure"}`]; s != 2 || f != 1 {
		t.Errorf("reloads: %v succeeded and %v failed, want 2 (the grant, the token) and 1", s, f)
	}
	if strings.Contains(tn.d.Logs(), newToken) || strings.Contains(tn.d.Logs(), batchToken) {
		t.Errorf("the logs show a token:\n%s", tn.d.Logs())
	}
}

// TestAuthzBadFileAtStart: a daemon does not start on a bad authorization
// policy, and says what is wrong where.
func TestAuthzBadFileAtStart(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, policy, want string
	}{
		{"bad access", "clients:\n  - name: a\n    match: [{common_name: a}]\n    grants: [{domains: [a], access: write}]\n", `authz.yaml:4: clients[0].grants[0].access: "write": want check (or peek), charge or refund, or a list of them`},
		{"missing token file", "clients:\n  - name: a\n    match: [{tokens: none.tokens}]\n    grants: [{domains: [a], access: peek}]\n", "authz.yaml:3: clients[0].match[0].tokens: token file " + filepath.Join(dir, "none.tokens") + ": no such file or directory"},
		{"no such file", "", "authz.yaml: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "authz.yaml")
			os.Remove(path)
			if tt.policy != "" {
				writeFile(t, path, tt.policy)
			}
			d, err := daemon.Start(daemon.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", AuthzPolicy: path})
			if err == nil {
				d.Shutdown(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// startBillingWithAuthz runs a daemon serving billingDomain under
// tenantsAuthz, without TLS (the batch caller's token file beside it).
func startBillingWithAuthz(t *testing.T) *daemontest.Daemon {
	t.Helper()
	dir := t.TempDir()
	authzPath := filepath.Join(dir, "authz.yaml")
	writeFile(t, authzPath, tenantsAuthz)
	writeFile(t, filepath.Join(dir, "batch.tokens"), batchToken+"\n")
	policy := filepath.Join(t.TempDir(), "billing.yaml")
	writeFile(t, policy, billingDomain)
	return daemontest.StartConfig(t, daemon.Config{ConfigPath: policy, AuthzPolicy: authzPath})
}
