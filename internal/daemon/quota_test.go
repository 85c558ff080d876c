package daemon_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// TestAuthzQuotaStreams: with an authorization policy, taking shares of a
// domain is a charge of it: a caller without credentials, or with a grant
// of another domain only, has its quota stream ended at its first report;
// a caller that may charge the domain gets its assignment.
func TestAuthzQuotaStreams(t *testing.T) {
	dir := t.TempDir()
	authzPath := filepath.Join(dir, "authz.yaml")
	writeFile(t, authzPath, tenantsAuthz)
	writeFile(t, filepath.Join(dir, "batch.tokens"), batchToken+"\n")
	policy := t.TempDir()
	writeFile(t, filepath.Join(policy, "billing.yaml"), billingDomain)
	writeFile(t, filepath.Join(policy, "shop.yaml"), shopDomain)
	d := daemontest.StartConfig(t, daemon.Config{ConfigPath: policy, AuthzPolicy: authzPath})
	client := rlqsv3.NewRateLimitQuotaServiceClient(d.Dial(t))
	report := func(ctx context.Context, domain string) error {
		s, err := client.StreamRateLimitQuotas(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": "alice"}}, NumRequestsAllowed: 1},
		}}); err != nil && !errors.Is(err, io.EOF) {
			return err // io.EOF: the server ended the stream; Recv says why
		}
		_, err = s.Recv()
		return err
	}
	wantRefused(t, report(context.Background(), "billing"), codes.Unauthenticated, "no client certificate or bearer token")
	batch := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+batchToken)
	wantRefused(t, report(batch, "shop"), codes.PermissionDenied, `may not call domain "shop"`)
	if err := report(batch, "billing"); err != nil {
		t.Fatalf("the batch client's quota stream for billing: %v", err)
	}
}
