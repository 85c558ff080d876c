package quota

import (
	"slices"
	"time"
)

// Pool is a daemon's part of a limit shared with other daemons, from the
// ledger.
type Pool struct {
	// Grant is the most this daemon's clients of the bucket may together
	// be applying, in requests per period.
	Grant int64
	// Others are the demands of the other daemons' live clients of the
	// bucket, in requests per period.
	Others []int64
	// Until is when the grant stops holding (Unix ns): no assignment is
	// sent that its client may still apply after it.
	Until int64
}

// Claim is what a daemon asks the ledger for one bucket.
type Claim struct {
	Bucket string
	// Limit is the bucket's limit, which all daemons' grants share.
	Limit int64
	// Keep is what the daemon's clients may already be applying: the
	// grant is never below it.
	Keep int64
	// Want is what the daemon's clients would be applying at their
	// targets (and never less than Keep): the grant is at most that.
	Want int64
	// Demands are the daemon's live clients' demands (the others' Others).
	Demands []int64
	// Lease is how long the daemon's entry holds after the ledger records
	// it; 0 with Keep, Want and Demands empty removes the entry.
	Lease time.Duration
}

// Grant is the ledger's answer to a Claim.
type Grant struct {
	Grant  int64
	Others []int64
}

// NewShared returns an allocator for limits shared with other daemons
// through a ledger (the package doc: Limits shared by several daemons):
// it sends nothing for a bucket until SetPools has given it the bucket's
// pool, and answers reports in Tick, not in Report.
func NewShared(interval time.Duration) *Allocator {
	a := New(interval)
	a.shared = true
	return a
}

// LeaseSlack is how much longer than its clients' longest assignment life
// a daemon's ledger entry holds, so that an entry renewed every second or
// so never lapses while the daemon is up and reaches the ledger.
const LeaseSlack = 2 * time.Second

// ClaimEveryDen: a bucket is claimed at least every 1/ClaimEveryDen of
// its clients' shortest report interval, with news or not, so that the
// other daemons' demands (the answer's Others) are at most that old.
const ClaimEveryDen = 2

// shortest is the shortest report interval of b's clients.
func shortest(b *bucket) time.Duration {
	var least time.Duration
	for _, x := range b.clients {
		if least == 0 || x.interval < least {
			least = x.interval
		}
	}
	return least
}

// life is the longest an assignment sent now to a client of b lives: its
// time to live and delivery.
func life(b *bucket) time.Duration {
	var most time.Duration
	for _, x := range b.clients {
		most = max(most, x.ttl()+x.interval/DeliveryDen)
	}
	return most
}

// usable reports whether assignments can be sent for b at now: always for
// a limit not shared; for a shared one, while its pool is in force for
// the longest life of an assignment sent now.
func (a *Allocator) usable(b *bucket, now int64) bool {
	if !a.shared {
		return true
	}
	return b.pool != nil && now+int64(life(b)) <= b.pool.Until
}

// targets returns the max-min fair shares of b's limit for the demands of
// its live clients, the other daemons' clients counted (shared). The
// remainder of an uneven division goes to the other daemons' clients
// first: each daemon divides alike, so that their targets together never
// exceed the limit (some units may go unused, fewer than the clients).
func (a *Allocator) targets(b *bucket, demands []int64) []int64 {
	if b.pool == nil || len(b.pool.Others) == 0 {
		return MaxMinFair(b.limit.Requests, demands)
	}
	return MaxMinFair(b.limit.Requests, append(slices.Clip(b.pool.Others), demands...))[len(b.pool.Others):]
}

// capacity is what b's clients may together be applying: the limit, or of
// a shared one this daemon's grant.
func (a *Allocator) capacity(b *bucket) int64 {
	if b.pool == nil {
		return b.limit.Requests
	}
	return min(b.limit.Requests, b.pool.Grant)
}

// Claims returns at now what the daemon asks the ledger, for each bucket
// reported since the last claim (its demands published, its grant not
// grown: the full claim follows at the next call), whose claim changed,
// whose pool needs renewing or whose last claim is half its clients'
// shortest report interval old, and one
// removal for each bucket forgotten since; the claimed buckets grow
// no more until SetPools answers. Buckets come in key order.
func (a *Allocator) Claims(now int64) []Claim {
	var claims []Claim
	for _, key := range a.released {
		if a.buckets[key] == nil {
			claims = append(claims, Claim{Bucket: key})
		}
	}
	a.released = a.released[:0]
	for _, key := range a.bucketKeys() {
		b := a.buckets[key]
		c := a.claim(key, b, now)
		switch {
		case b.publishing: // the full claim, on the others' latest demands
			b.publishing = false
		case b.news: // publish the reports' demands, growing nothing yet
			if b.pool != nil {
				c.Want = min(c.Want, max(c.Keep, b.pool.Grant))
			} else {
				c.Want = c.Keep
			}
			b.publishing = true
		default:
			renew := b.pool == nil || now+int64(life(b)+LeaseSlack/2) > b.pool.Until ||
				now-b.claimedAt >= int64(shortest(b)/ClaimEveryDen)
			if !renew && b.pool.Grant == c.Want && c.Limit == b.claimed.Limit && slices.Equal(c.Demands, b.claimed.Demands) {
				continue // nothing new here, the others' news not due, and the pool holds a while yet
			}
		}
		b.claimed, b.claimedAt, b.news = c, now, false
		if b.pool != nil {
			b.pool.Grant = min(b.pool.Grant, c.Keep)
		}
		claims = append(claims, c)
	}
	return claims
}

// claim is b's claim at now: what its clients may be applying, what they
// would at their targets, their demands.
func (a *Allocator) claim(key string, b *bucket, now int64) Claim {
	c := Claim{Bucket: key, Limit: b.limit.Requests, Lease: life(b) + LeaseSlack}
	ids := make([]string, 0, len(b.clients))
	for id := range b.clients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var lives []*client
	for _, id := range ids {
		x := b.clients[id]
		c.Keep += x.committed(now)
		if x.live(now) {
			lives = append(lives, x)
			c.Demands = append(c.Demands, x.demand)
		}
	}
	targets := a.targets(b, c.Demands)
	c.Want = c.Keep
	for i, x := range lives {
		c.Want += max(targets[i]-x.committed(now), 0)
	}
	return c
}

// SetPools gives the buckets of claims, made at claimedAt, the ledger's
// grants (in the same order); grants for buckets forgotten meanwhile are
// ignored. Call Tick after it to send what the grants allow.
func (a *Allocator) SetPools(claims []Claim, grants []Grant, claimedAt int64) {
	for i, c := range claims {
		b := a.buckets[c.Bucket]
		if b == nil || c.Lease == 0 {
			continue
		}
		b.pool = &Pool{Grant: grants[i].Grant, Others: grants[i].Others, Until: claimedAt + int64(c.Lease)}
	}
}
