package quotaservice

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/quota"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// Client is one quota client (an RLQS stream): its buckets, and its
// answers queued for its sender (Ready, Take). Report is called by one
// goroutine at a time; Ready and Take by another, its sender.
type Client struct {
	s        *Service
	id, peer string
	domain   string // the domain its reports are of
	tenant   string // whose table share its buckets count against
	known    string // domain if the policy has it, else "" (observer); s.mu
	ready    chan struct{}
	sent     chan struct{} // the sender took what was pending

	mu      sync.Mutex
	pending []Action
	at      map[string]int           // pending's index by Action.id
	buckets map[string]clientBucket  // by allocator key
	idle    map[string]time.Duration // how long each has asked nothing (retire.go)
}

// clientBucket is a bucket of shares as the client last named it.
type clientBucket struct {
	name map[string]string // Usage.Bucket
	id   string            // Action.id
}

// Usage is one bucket's usage in a client's report.
type Usage struct {
	// Bucket is the bucket as the client names it, sent back in the
	// bucket's actions.
	Bucket map[string]string
	// Entries are Bucket's entries sorted by key, within the engine's
	// Bounds (engine.Bounds.CheckEntries): the descriptor matched against
	// the domain's rules.
	Entries []config.Entry
	// Asked is what the client was asked for the bucket since its
	// previous report (requests allowed plus denied, quota.Asked);
	// Elapsed is the time since that report (0: none, or not said).
	Asked   uint64
	Elapsed time.Duration
}

// Open registers a client of domain whose reports the caller has checked
// (Usage) and authorized: peer is its address (View), caller the tenant
// its buckets count against (MaxTenantBuckets; "" for one that cannot be
// told apart from others, which counts against its domain). Close it when
// it ends.
func (s *Service) Open(peer, domain, caller string) *Client {
	tenant := "domain " + strconv.Quote(domain)
	if caller != "" {
		tenant = "caller " + strconv.Quote(caller)
	}
	c := &Client{s: s, id: strconv.FormatUint(s.ids.Add(1), 10), peer: peer, domain: domain, tenant: tenant,
		ready: make(chan struct{}, 1), sent: make(chan struct{}, 1),
		buckets: map[string]clientBucket{}, idle: map[string]time.Duration{}}
	s.mu.Lock()
	s.clients[c.id] = c
	s.mu.Unlock()
	return c
}

// Close forgets a client: its shares stay committed until they expire.
func (c *Client) Close() {
	s := c.s
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clients, c.id)
	c.mu.Lock()
	keys := make([]string, 0, len(c.buckets))
	for k := range c.buckets {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		s.push(s.alloc.Gone(k, c.id, now))
	}
}

// Report applies a report's usages and queues their answers, and the
// shares of other clients that changed. Each usage is answered on its own:
// a bucket no limit is divided for (no rule, unlimited, DenyAll) without
// the service's lock, a bucket of shares under it, one at a time, so that
// a large report does not hold other clients' reports up; and while
// MaxPending or more of the client's answers are untaken, the next usage
// waits for the sender to take them. It returns ctx's error if ctx ends
// meanwhile; the usages before it are applied.
func (c *Client) Report(ctx context.Context, usages []Usage) error {
	s := c.s
	d := s.domain(c.domain)
	known := ""
	if d != nil {
		known = c.domain
	}
	s.mu.Lock()
	c.known = known // read by pushes, under s.mu
	s.mu.Unlock()
	for i := range usages {
		if err := c.backlog(ctx); err != nil {
			return err
		}
		s.observer.Reported(known)
		c.usage(d, &usages[i])
	}
	return nil
}

// usage answers one usage of a bucket of d.
func (c *Client) usage(d *config.Domain, u *Usage) {
	s := c.s
	rule := d.Match(u.Entries)
	limit, blanket := ruleLimit(rule)
	var buf [256]byte // the keys are built here, and copied into their strings
	id := string(engine.AppendBucketKey(buf[:0], c.domain, u.Entries, nil, ""))
	if limit == nil {
		c.send(Action{Bucket: u.Bucket, Kind: blanket, Assignment: quota.Assignment{TTL: s.ttl(u.Elapsed)}, id: id})
		return
	}
	key := string(engine.AppendBucketKey(buf[:0], c.domain, u.Entries, rule.Shared, limit.Key))
	ql := quota.Limit{Requests: limit.Rate.Requests() / s.daemons, Period: limit.Rate.Period()}
	b := clientBucket{name: u.Bucket, id: id}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.retire(key, b, u.Asked, u.Elapsed, s.clock.Now()) {
		return
	}
	if why := c.refusal(key); why != "" {
		c.refuse(b, why, u.Elapsed)
		return
	}
	s.table.keep(key, bucketInfo{domain: c.domain, id: u.Bucket, rule: rule.StatKey, tenant: c.tenant})
	c.mu.Lock()
	c.buckets[key] = b // for pushes, the reply's included
	c.mu.Unlock()
	a, ok, pushes := s.alloc.Report(key, ql, c.id, u.Asked, u.Elapsed, s.clock.Now())
	if ok { // else pushed once the ledger has answered (a shared limit)
		c.send(share(b, a))
	}
	s.push(pushes)
}

// ttl is the time to live of a blanket answer to a report of elapsed:
// an assignment's, for the report interval elapsed says (quota.Interval:
// at most quota.MaxInterval).
func (s *Service) ttl(elapsed time.Duration) time.Duration {
	return quota.TTL(quota.Interval(elapsed, s.interval))
}

// push sends each push to its client, if it is still open. s.mu is held.
func (s *Service) push(pushes []quota.Push) {
	for _, p := range pushes {
		c := s.clients[p.Client]
		if c == nil {
			continue
		}
		c.mu.Lock()
		b, ok := c.buckets[p.Bucket]
		c.mu.Unlock()
		if ok {
			c.send(share(b, p.Assignment))
		}
	}
}
