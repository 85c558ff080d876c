package quotaservice

import (
	"strconv"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

// Bounds on what quota clients make the service keep.
const (
	// MaxClientBuckets is how many buckets of shares one client may
	// report.
	MaxClientBuckets = 1024
	// MaxBuckets is how many buckets of shares the service keeps, for all
	// tenants together.
	MaxBuckets = 1 << 16
	// MaxTenantBuckets is how many of them one tenant's clients may bring
	// in: a sixteenth, so that it takes sixteen tenants at their bound to
	// fill the table.
	MaxTenantBuckets = MaxBuckets / 16
)

// bucketInfo is what the allocator's key stands for.
type bucketInfo struct {
	domain string
	id     map[string]string
	rule   string // StatKey
	tenant string // whose report brought it in
}

// table is the buckets of shares, by allocator key, and how many of them
// each tenant brought in. A bucket counts against the tenant whose report
// brought it in until the allocator forgets it, whoever reports it
// meanwhile.
type table struct {
	buckets map[string]bucketInfo
	tenants map[string]int
}

func newTable() table {
	return table{buckets: map[string]bucketInfo{}, tenants: map[string]int{}}
}

// keep records info for key, counted against info.tenant when key is new.
func (t *table) keep(key string, info bucketInfo) {
	if old, ok := t.buckets[key]; ok {
		info.tenant = old.tenant
	} else {
		t.tenants[info.tenant]++
	}
	t.buckets[key] = info
}

// forget removes key, if kept.
func (t *table) forget(key string) {
	info, ok := t.buckets[key]
	if !ok {
		return
	}
	delete(t.buckets, key)
	if t.tenants[info.tenant]--; t.tenants[info.tenant] <= 0 {
		delete(t.tenants, info.tenant)
	}
}

// refusal says why a bucket new to c is not served: "" when it is. s.mu
// is held.
func (c *Client) refusal(key string) string {
	s := c.s
	c.mu.Lock()
	_, known := c.buckets[key]
	n := len(c.buckets)
	c.mu.Unlock()
	switch {
	case known:
		return ""
	case n >= MaxClientBuckets:
		return "this stream already reports " + strconv.Itoa(n) + " buckets, the most one stream may"
	}
	if _, ok := s.table.buckets[key]; ok {
		return ""
	}
	if n := s.table.tenants[c.tenant]; n >= MaxTenantBuckets {
		return "the " + c.tenant + " already has " + strconv.Itoa(n) + " buckets served by quota, the most one tenant may"
	}
	if n := len(s.table.buckets); n >= MaxBuckets {
		return "the server already serves " + strconv.Itoa(n) + " buckets by quota, the most it keeps"
	}
	return ""
}

// refuse answers a bucket beyond a bound with DenyAll for an answer's
// life (the limit is not divided for it, and not given away either), and
// says so in the log (at most a line a minute while refusals go on) and to
// the observer. s.mu is held.
func (c *Client) refuse(b clientBucket, why string, elapsed time.Duration) {
	s := c.s
	s.observer.Refused(c.known)
	if log, since, n := s.full.Start(); log { // the first refusal, then at most a line a minute
		s.log.Warn("quota: buckets beyond a bound are answered DENY_ALL (docs/quota.md, Bounds)",
			"domain", c.domain, "why", why, "refused", n, "since_first_refusal", since)
	}
	c.send(Action{Bucket: b.name, Kind: DenyAll, Assignment: quota.Assignment{TTL: s.ttl(elapsed)}, id: b.id})
}
