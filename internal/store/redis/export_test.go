package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/store"
)

// Paths returns how many charges the script has decided on plain numbers
// (fast.lua) and on bignums.
func Paths(s *Store) (fast, bignum uint64) { return s.stats.fast.Load(), s.stats.bignum.Load() }

// SettleBatch runs settle.lua once on c, as a sender sends a batch, for
// one request per charge: charges[i] on the key keys[i] (the key as
// stored, prefix included), on Redis TIME, without linger.
func SettleBatch(ctx context.Context, c goredis.Scripter, keys []string, charges []store.Charge) error {
	args := (&Store{linger: "0"}).settleHead(redisTime, false, len(charges))
	for i := range charges {
		args = appendRequest(args, &exportedSpecs, charges, []int{i}, nil)
	}
	return settleScript.Run(ctx, c, keys, args...).Err()
}

var exportedSpecs chargeSpecs

// Warmed returns a channel closed once s has made the connections of the
// batches that may be in flight at once.
func Warmed(s *Store) <-chan struct{} { return s.warmed }
