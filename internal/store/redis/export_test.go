package redis

import "github.com/ratelimitd/ratelimitd/internal/clock"

// SetTestClock makes s decide at c's time, passed to the script as now
// instead of Redis TIME (so that a test and the memory store share one
// timeline), and write keys without expiry, as Redis's own clock no
// longer says when a bucket is at rest. Call it before the first Apply.
func SetTestClock(s *Store, c clock.Clock) { s.testNow = c }

// Paths returns how many charges the script has decided on plain numbers
// (fast.lua) and on bignums.
func Paths(s *Store) (fast, bignum uint64) { return s.stats.fast.Load(), s.stats.bignum.Load() }
