package daemon

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/api/authz"
	"github.com/ratelimitd/ratelimitd/internal/api/rlqsapi"
	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// quotaTick is how often the quota service rebalances between reports, so
// that a share freed by expiry reaches the streams that need it soon.
const quotaTick = 100 * time.Millisecond

// newQuota returns the quota service on the policy in force, and Envoy's
// RLQS on it. With an authorization policy, taking shares of a domain's
// limits is a charge of that domain, and a caller's buckets count against
// the caller (the policy's clients it matches); without one, against their
// domain.
func (d *Daemon) newQuota() (*quotaservice.Service, *rlqsapi.Server) {
	m := d.metrics.NewQuota()
	opts := []quotaservice.Option{quotaservice.WithObserver(m), quotaservice.WithDaemons(d.cfg.QuotaDaemons),
		quotaservice.WithLogger(d.cfg.Logger)}
	if l := d.store.quotaLedger(); l != nil { // shared with the other daemons on the store
		opts = append(opts, quotaservice.WithLedger(l))
	}
	q := quotaservice.New(func() *config.Policy { return d.loadedPolicy().Policy }, d.cfg.Clock, opts...)
	apiOpts := []rlqsapi.Option{rlqsapi.WithMetrics(m), rlqsapi.WithBounds(d.cfg.Bounds), rlqsapi.WithDrain(d.drain)}
	if d.authz != nil {
		apiOpts = append(apiOpts, rlqsapi.WithAuthorize(func(ctx context.Context, domain string) error {
			return d.authz.Authorize(authz.FromGRPC(ctx), domain, authz.Charge)
		}), rlqsapi.WithTenant(func(ctx context.Context, _ string) string {
			return d.authz.Caller(authz.FromGRPC(ctx)) // anonymous callers: by domain
		}))
	}
	return q, rlqsapi.New(q, apiOpts...)
}

// Quota returns the daemon's quota service.
func (d *Daemon) Quota() *quotaservice.Service { return d.quota }
