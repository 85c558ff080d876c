package daemon

import (
	"time"

	"github.com/ratelimitd/ratelimitd/internal/config"
	"github.com/ratelimitd/ratelimitd/internal/rlqsapi"
)

// quotaTick is how often the quota service rebalances between reports, so
// that a share freed by expiry reaches the streams that need it soon.
const quotaTick = 100 * time.Millisecond

// newQuota returns the quota service (Envoy's RLQS) on the policy in force.
func (d *Daemon) newQuota() *rlqsapi.Server {
	return rlqsapi.New(func() *config.Policy { return d.loadedPolicy().Policy }, d.cfg.Clock,
		rlqsapi.WithMetrics(d.metrics.NewQuota()), rlqsapi.WithBounds(d.cfg.Bounds), rlqsapi.WithDrain(d.drain))
}

// Quota returns the daemon's quota service.
func (d *Daemon) Quota() *rlqsapi.Server { return d.quota }
