package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// SetTestClock makes s decide at c's time, passed to the script as now
// instead of Redis TIME (so that a test and the memory store share one
// timeline), and write keys without expiry, as Redis's own clock no
// longer says when a bucket is at rest. Call it before the first Apply.
func SetTestClock(s *Store, c clock.Clock) {
	s.scriptTime = func() ([2]string, expiry) { return nowArgs(c.Now()), noExpiry }
}

// Paths returns how many charges the script has decided on plain numbers
// (fast.lua) and on bignums.
func Paths(s *Store) (fast, bignum uint64) { return s.stats.fast.Load(), s.stats.bignum.Load() }

// SettleBatch runs settle.lua once on c, as a sender sends a batch, for
// one request per charge: charges[i] on the key keys[i] (the key as
// stored, prefix included), on Redis TIME, with expiry.
func SettleBatch(ctx context.Context, c goredis.Scripter, keys []string, charges []store.Charge) error {
	args := settleHead([2]string{"", ""}, expireAt, false, len(charges))
	for i := range charges {
		args = appendRequest(args, &exportedSpecs, charges, []int{i}, nil)
	}
	return settleScript.Run(ctx, c, keys, args...).Err()
}

var exportedSpecs chargeSpecs

// Warmed returns a channel closed once s has made the connections of the
// batches that may be in flight at once.
func Warmed(s *Store) <-chan struct{} { return s.warmed }
