package daemon

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/api/authz"
	"github.com/ratelimitd/ratelimitd/internal/api/rlqsapi"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// quotaTick is how often the quota service rebalances between reports, so
// that a share freed by expiry reaches the streams that need it soon.
const quotaTick = 100 * time.Millisecond

// newQuota returns the quota service (Envoy's RLQS) on the policy in force.
// With an authorization policy, taking shares of a domain's limits is a
// charge of that domain, and a caller's buckets count against the caller
// (the policy's clients it matches); without one, against their domain.
func (d *Daemon) newQuota() *rlqsapi.Server {
	opts := []rlqsapi.Option{rlqsapi.WithMetrics(d.metrics.NewQuota()), rlqsapi.WithBounds(d.cfg.Bounds),
		rlqsapi.WithDrain(d.drain), rlqsapi.WithDaemons(d.cfg.QuotaDaemons), rlqsapi.WithLogger(d.cfg.Logger)}
	if l := d.store.quotaLedger(); l != nil { // shared with the other daemons on the store
		opts = append(opts, rlqsapi.WithLedger(l, d.cfg.Logger))
	}
	if d.authz != nil {
		opts = append(opts, rlqsapi.WithAuthorize(func(ctx context.Context, domain string) error {
			return d.authz.Authorize(authz.FromGRPC(ctx), domain, authz.Charge)
		}), rlqsapi.WithTenant(func(ctx context.Context, _ string) string {
			return d.authz.Caller(authz.FromGRPC(ctx)) // anonymous callers: by domain
		}))
	}
	return rlqsapi.New(func() *config.Policy { return d.loadedPolicy().Policy }, d.cfg.Clock, opts...)
}

// Quota returns the daemon's quota service.
func (d *Daemon) Quota() *rlqsapi.Server { return d.quota }
