package quota

import (
	"math"
	"time"
)

// Bounds on what a report can make the allocator (and the ledger) keep.
const (
	// MaxInterval is the longest report interval the allocator takes a
	// client's word for. A report whose elapsed time is longer counts as
	// one of MaxInterval for its time to live and for how long its share
	// stays committed (its demand is still what it asked over what it
	// says elapsed): a client cannot, by saying a year elapsed, have its
	// share held for a year and a half after it leaves.
	MaxInterval = time.Minute
	// MaxLife is the longest an assignment stays committed after it is
	// sent: the time to live and the delivery of a client of MaxInterval,
	// 1.75 minutes. No share outlives its client's last report by more.
	MaxLife = MaxInterval*TTLNum/TTLDen + MaxInterval/DeliveryDen
	// MaxLease is the longest a daemon's ledger entry (and so a ledger
	// key) holds beyond the daemon's last claim: MaxLife plus LeaseSlack.
	MaxLease = MaxLife + LeaseSlack
)

// Interval is the report interval that a report's elapsed time says:
// elapsed, at most MaxInterval; assumed (bounded as well) when elapsed is
// 0 (a first report, or one that does not say).
func Interval(elapsed, assumed time.Duration) time.Duration {
	if elapsed <= 0 {
		elapsed = assumed
	}
	return min(elapsed, MaxInterval)
}

// Asked is what a report asked: allowed plus denied, saturating at the
// largest uint64 rather than wrapping round to a small number.
func Asked(allowed, denied uint64) uint64 {
	if allowed > math.MaxUint64-denied {
		return math.MaxUint64
	}
	return allowed + denied
}
