// Package quota makes a Go service a quota client of ratelimitd (or of any
// server of Envoy's Rate Limit Quota Service, RLQS): it decides requests
// locally, at in-process cost, against a share of a global limit that the
// server assigns it and rebalances by demand.
//
//	q, err := quota.New("ratelimitd:8081", "shop")
//	...
//	defer q.Close()
//	checkout := q.Bucket("route", "checkout") // the descriptor [(route, checkout)]
//	if !checkout.Allow(ctx) {
//		http.Error(w, "too many requests", http.StatusTooManyRequests)
//		return
//	}
//
// A Bucket is named as Envoy's filter names it, by a BucketId: key/value
// pairs, which ratelimitd matches as a descriptor's entries sorted by key
// (see docs/quota.md). The client speaks the protocol as Envoy's
// rate_limit_quota filter does: one stream per Client for its domain; a
// bucket's first request is reported at once, and then every bucket is
// reported every interval (WithInterval), requests allowed and denied;
// the server's assignments (a token bucket, allow all, deny all) are
// enforced until their time to live runs out.
//
// Unlike Envoy, a new assignment does not start with a full bucket: the
// tokens left carry over (up to the new burst), so a client never admits
// more than its share's rate plus one burst in any stretch of time.
//
// Before a bucket's first assignment, and once its last one has expired
// (the stream broke and was not restored in time), the bucket applies the
// fallback: allow all, as Envoy's filter does by default, deny all, or ask
// the server per request — the domain's quota_fallback in ratelimitd's
// policy, learnt with the stream's first response, unless WithFallback or
// WithAsk says otherwise. When the stream breaks, the
// client reconnects with backoff and goes on applying each bucket's last
// assignment until it expires.
//
// Allow costs tens of nanoseconds and does not allocate (see the
// benchmark); it is safe for concurrent use.
package quota

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// Fallback is what a bucket does without an assignment in force.
type Fallback int

const (
	// AllowAll admits every request (Envoy's default).
	AllowAll Fallback = iota
	// DenyAll denies every request.
	DenyAll
	// AskPerRequest asks the function given to WithAsk for each request.
	AskPerRequest
)

// Client is one stream to a quota server for one domain, and its buckets.
type Client struct {
	domain   string
	conn     *grpc.ClientConn
	interval time.Duration
	fallback atomic.Int32 // a Fallback
	explicit bool         // set by an option: the policy's does not replace it
	ask      func(ctx context.Context, bucket []string) bool
	start    time.Time // monotonic origin of now
	clock    func() int64
	dialOpts []grpc.DialOption

	mu      sync.Mutex
	buckets map[string]*Bucket
	fresh   chan struct{} // a new bucket to report at once

	stop context.CancelFunc
	done chan struct{}
}

// Option configures a Client.
type Option func(*Client)

// WithInterval sets how often every bucket's usage is reported (default
// 1s; Envoy's filter calls it reporting_interval).
func WithInterval(d time.Duration) Option { return func(c *Client) { c.interval = d } }

// WithFallback sets what a bucket does without an assignment in force.
// Without it (and without WithAsk) the client takes the domain's
// quota_fallback from ratelimitd's policy once the stream is up, and
// allows all until then, as Envoy's filter does by default.
func WithFallback(f Fallback) Option {
	return func(c *Client) { c.fallback.Store(int32(f)); c.explicit = true }
}

// WithAsk sets the fallback to AskPerRequest: ask decides each request
// without an assignment in force, given the bucket's key/value pairs
// sorted by key. Without it, AskPerRequest (set by WithFallback or by the
// policy) asks ratelimitd's ratelimit.v1 ShouldRateLimit on the same
// connection, the pairs as one descriptor, allowing when it cannot answer.
func WithAsk(ask func(ctx context.Context, bucket []string) bool) Option {
	return func(c *Client) { c.fallback.Store(int32(AskPerRequest)); c.explicit, c.ask = true, ask }
}

// WithDialOptions adds gRPC dial options (the default is plaintext).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *Client) { c.dialOpts = append(c.dialOpts, opts...) }
}

// New connects to the quota server at target for domain and starts the
// stream. It fails only for a bad target or options; an unreachable
// server is retried in the background.
func New(target, domain string, opts ...Option) (*Client, error) {
	if domain == "" {
		return nil, errors.New("quota: empty domain")
	}
	c := &Client{domain: domain, interval: time.Second, start: time.Now(), buckets: map[string]*Bucket{},
		fresh: make(chan struct{}, 1), done: make(chan struct{}),
		dialOpts: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}}
	for _, o := range opts {
		o(c)
	}
	if c.interval <= 0 {
		return nil, errors.New("quota: the report interval must be positive")
	}
	conn, err := grpc.NewClient(target, c.dialOpts...)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	if c.ask == nil {
		c.ask = c.askService
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.run(ctx)
	return c, nil
}

// Close ends the stream and the connection.
func (c *Client) Close() error {
	c.stop()
	<-c.done
	return c.conn.Close()
}

// now is monotonic nanoseconds since the client started (or the tests'
// clock).
func (c *Client) now() int64 {
	if c.clock != nil {
		return c.clock()
	}
	return int64(time.Since(c.start))
}

// Bucket returns the bucket named by key/value pairs (key1, value1, key2,
// value2, ...; an odd last key has the value ""), the same Bucket for the
// same pairs in any order. Its first Allow reports it at once.
func (c *Client) Bucket(pairs ...string) *Bucket {
	if len(pairs)%2 == 1 {
		pairs = append(pairs, "")
	}
	id := make(map[string]string, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		id[pairs[i]] = pairs[i+1]
	}
	key := bucketKey(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.buckets[key]; b != nil {
		return b
	}
	sorted := make([]string, 0, 2*len(id))
	for _, k := range sortedKeys(id) {
		sorted = append(sorted, k, id[k])
	}
	b := &Bucket{c: c, id: id, pairs: sorted, first: make(chan struct{})}
	c.buckets[key] = b
	return b
}

func sortedKeys(id map[string]string) []string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// bucketKey names a BucketId whatever the order of its keys.
func bucketKey(id map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(id) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(id[k])
		b.WriteByte(0)
	}
	return b.String()
}

// Admit decides a request named by descriptors locally, as httplimit and
// grpclimit do with WithQuota: each descriptor is the bucket of its
// entries' pairs (Descriptor.Pairs; a key given twice keeps its last
// value), and the request is admitted when each bucket, asked in order,
// admits it. Unlike the service's all-or-nothing charge, the buckets asked
// before one that denies have spent their token. It returns the index of
// the descriptor that denied (-1 when admitted).
func (c *Client) Admit(ctx context.Context, descriptors ...client.Descriptor) (ok bool, denied int) {
	for i, d := range descriptors {
		if !c.Bucket(d.Pairs()...).Allow(ctx) {
			return false, i
		}
	}
	return true, -1
}

// Bucket is one quota bucket: its assignment and its usage since the last
// report.
type Bucket struct {
	c     *Client
	id    map[string]string
	pairs []string // sorted by key

	assigned atomic.Pointer[assignment]
	// tat is the token bucket's theoretical arrival time (GCRA): the bucket
	// is full when tat <= now, and each admitted request moves it one
	// emission interval on.
	tat             atomic.Int64
	subscribed      atomic.Bool
	allowed, denied atomic.Uint64

	first     chan struct{} // closed when the first assignment arrives
	firstOnce sync.Once
}

// assignment is what the server said, ready for Allow.
type assignment struct {
	rule                     typev3.RateLimitStrategy_BlanketRule // with every == 0
	strategy                 string                               // TOKEN_BUCKET or REQUESTS_PER_TIME_UNIT, with every > 0
	every                    int64                                // ns per token; 0 for a blanket rule
	burst                    int64                                // max tokens
	until                    int64                                // expiry, client nanoseconds
	maxTokens, tokensPerFill uint32
	fill                     time.Duration
}

// Allow reports whether one request may go through now, and counts it for
// the next report. ctx is used only by the AskPerRequest fallback.
func (b *Bucket) Allow(ctx context.Context) bool {
	now := b.c.now()
	a := b.assigned.Load()
	if a == nil || now >= a.until {
		first := !b.subscribed.Load() && b.subscribed.CompareAndSwap(false, true)
		ok := b.count(b.fallback(ctx))
		if first {
			// After counting, so that the first report carries the first
			// request, as Envoy's filter's does.
			b.c.reportNow()
		}
		return ok
	}
	if a.every == 0 {
		return b.count(a.rule != typev3.RateLimitStrategy_DENY_ALL)
	}
	// GCRA: admit when the bucket would hold a token, i.e. tat - now is at
	// most (burst-1) emission intervals.
	limit := (a.burst - 1) * a.every
	for {
		seen := b.tat.Load()
		tat := max(seen, now)
		if tat-now > limit || a.burst <= 0 {
			return b.count(false)
		}
		if b.tat.CompareAndSwap(seen, tat+a.every) {
			return b.count(true)
		}
	}
}

func (b *Bucket) count(ok bool) bool {
	if ok {
		b.allowed.Add(1)
	} else {
		b.denied.Add(1)
	}
	return ok
}

func (b *Bucket) fallback(ctx context.Context) bool {
	switch Fallback(b.c.fallback.Load()) {
	case DenyAll:
		return false
	case AskPerRequest:
		return b.c.ask(ctx, b.pairs)
	}
	return true
}

// askService asks ratelimitd whether one request of the bucket may go
// through, charging it; it allows when the service cannot answer.
func (c *Client) askService(ctx context.Context, pairs []string) bool {
	d := &ratelimitv1.Descriptor{}
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv1.Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	resp, err := ratelimitv1.NewRateLimitServiceClient(c.conn).ShouldRateLimit(ctx,
		&ratelimitv1.ShouldRateLimitRequest{Domain: c.domain, Descriptors: []*ratelimitv1.Descriptor{d}})
	return err != nil || resp.GetOverallCode() != ratelimitv1.Code_CODE_OVER_LIMIT
}

// takeFallback adopts the policy's quota_fallback from the stream's
// header, unless an option set one.
func (c *Client) takeFallback(md metadata.MD) {
	if c.explicit {
		return
	}
	if v := md.Get(fallbackHeader); len(v) == 1 {
		if f, ok := map[string]Fallback{"allow": AllowAll, "deny": DenyAll, "ask": AskPerRequest}[v[0]]; ok {
			c.fallback.Store(int32(f))
		}
	}
}

// fallbackHeader is the stream's response header in which ratelimitd names
// the domain's quota_fallback.
const fallbackHeader = "ratelimitd-quota-fallback"

// apply puts a new assignment in force at now, carrying the tokens left
// over (up to the new burst).
func (b *Bucket) apply(q *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction, now int64) {
	a := &assignment{until: now + int64(q.GetAssignmentTimeToLive().AsDuration())}
	s := q.GetRateLimitStrategy()
	switch {
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		per := uint64(1)
		if tb.GetTokensPerFill() != nil {
			per = uint64(tb.GetTokensPerFill().GetValue())
		}
		fill := tb.GetFillInterval().AsDuration()
		a.strategy, a.maxTokens, a.tokensPerFill, a.fill = "TOKEN_BUCKET", tb.GetMaxTokens(), uint32(per), fill
		a.burst = int64(tb.GetMaxTokens())
		if per == 0 || fill <= 0 {
			a.burst = 0 // never refills: only what it holds
			a.every = math.MaxInt64 / 4
		} else {
			a.every = max(1, int64((uint64(fill)+per-1)/per)) // never faster than assigned
		}
	case s.GetRequestsPerTimeUnit() != nil:
		r := s.GetRequestsPerTimeUnit()
		unit := map[typev3.RateLimitUnit]time.Duration{typev3.RateLimitUnit_SECOND: time.Second, typev3.RateLimitUnit_MINUTE: time.Minute,
			typev3.RateLimitUnit_HOUR: time.Hour, typev3.RateLimitUnit_DAY: 24 * time.Hour}[r.GetTimeUnit()]
		if r.GetRequestsPerTimeUnit() == 0 || unit == 0 {
			a.rule = typev3.RateLimitStrategy_DENY_ALL
			break
		}
		a.every = max(1, int64(unit)/int64(min(r.GetRequestsPerTimeUnit(), math.MaxInt64)))
		a.strategy, a.burst = "REQUESTS_PER_TIME_UNIT", 1
	default:
		a.rule = s.GetBlanketRule()
	}
	old := b.assigned.Load()
	if old != nil && old.every > 0 && a.every > 0 && old.until > now {
		// Carry the tokens over: those held under the old assignment, at
		// most the new burst.
		tokens := min(max(0, (now+old.burst*old.every-max(b.tat.Load(), now))/old.every), a.burst)
		b.tat.Store(now + (a.burst-tokens)*a.every)
	} else if a.every > 0 {
		b.tat.Store(now) // full, as Envoy starts an assignment
	}
	b.assigned.Store(a)
	b.firstOnce.Do(func() { close(b.first) })
}

// abandon drops the bucket's assignment and stops reporting it, as Envoy
// erases an abandoned bucket: the fallback applies, and the next Allow
// reports the bucket at once, as a new one's.
func (b *Bucket) abandon() {
	b.assigned.Store(nil)
	b.subscribed.Store(false)
}

// Assignment describes the assignment in force, for tests and logs: its
// rule — the blanket rule (ALLOW_ALL, DENY_ALL), TOKEN_BUCKET with the
// token bucket's max tokens, tokens per fill and fill interval, or
// REQUESTS_PER_TIME_UNIT; ok is false when none is in force.
func (b *Bucket) Assignment() (maxTokens, tokensPerFill uint32, fill time.Duration, rule string, ok bool) {
	a := b.assigned.Load()
	if a == nil || b.c.now() >= a.until {
		return 0, 0, 0, "", false
	}
	if a.every == 0 {
		return 0, 0, 0, a.rule.String(), true
	}
	return a.maxTokens, a.tokensPerFill, a.fill, a.strategy, true
}

// Wait reports the bucket at once if no request has, and waits until its
// first assignment arrives: nil then (at once if one arrived before), or
// ctx's error if ctx ends first. Until then Allow applies the fallback, so
// a service that must not admit by fallback waits, with a deadline, before
// it serves:
//
//	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
//	defer cancel()
//	if err := checkout.Wait(ctx); err != nil { ... } // no assignment in 2 s
func (b *Bucket) Wait(ctx context.Context) error {
	if !b.subscribed.Load() && b.subscribed.CompareAndSwap(false, true) {
		b.c.reportNow()
	}
	select {
	case <-b.first:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) anySubscribed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.buckets {
		if b.subscribed.Load() {
			return true
		}
	}
	return false
}

// reportNow asks the sender to report at once (a new bucket).
func (c *Client) reportNow() {
	select {
	case c.fresh <- struct{}{}:
	default:
	}
}

// run keeps the stream up, reconnecting with backoff, until ctx ends.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		c.stream(ctx)
		if time.Since(began) > 10*backoff {
			backoff = 100 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 10*time.Second)
	}
}

// stream runs one stream until it breaks or ctx ends.
func (c *Client) stream(ctx context.Context) {
	if !c.anySubscribed() { // the stream opens with the first report
		select {
		case <-ctx.Done():
			return
		case <-c.fresh:
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(c.conn).StreamRateLimitQuotas(ctx, grpc.WaitForReady(true))
	if err != nil {
		return
	}
	broke := make(chan struct{})
	go func() {
		defer close(broke)
		c.receive(s)
	}()
	first := true
	last := map[*Bucket]int64{} // when each bucket was last reported on this stream
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		sent, err := c.report(s, first, last)
		if err != nil {
			return
		}
		first = first && !sent
		select {
		case <-ctx.Done():
			return
		case <-broke:
			return
		case <-tick.C:
		case <-c.fresh:
		}
	}
}

// receive applies the assignments and abandonments s brings, and the
// fallback in its headers, until s breaks.
func (c *Client) receive(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	for first := true; ; first = false {
		resp, err := s.Recv()
		if err != nil {
			return
		}
		if first {
			if md, err := s.Header(); err == nil {
				c.takeFallback(md)
			}
		}
		now := c.now()
		c.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			b := c.buckets[bucketKey(a.GetBucketId().GetBucket())]
			switch {
			case b == nil:
			case a.GetAbandonAction() != nil:
				b.abandon()
			case a.GetQuotaAssignmentAction() != nil:
				b.apply(a.GetQuotaAssignmentAction(), now)
			}
		}
		c.mu.Unlock()
	}
}

// report sends the usage of the buckets due (those not reported within
// this interval on this stream), the domain with the stream's first; it
// reports whether it sent anything.
func (c *Client) report(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, first bool, last map[*Bucket]int64) (bool, error) {
	now := c.now()
	c.mu.Lock()
	var usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	for _, b := range c.buckets {
		if !b.subscribed.Load() {
			delete(last, b) // abandoned: reported anew, as a new bucket
			continue
		}
		at, seen := last[b]
		if seen && now-at < int64(c.interval)*9/10 {
			continue // reported within this interval already
		}
		u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b.id},
			NumRequestsAllowed: b.allowed.Swap(0), NumRequestsDenied: b.denied.Swap(0),
		}
		if seen {
			u.TimeElapsed = durationpb.New(time.Duration(now - at))
		}
		last[b] = now
		usages = append(usages, u)
	}
	c.mu.Unlock()
	if len(usages) == 0 {
		return false, nil
	}
	r := &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: usages}
	if first {
		r.Domain = c.domain
	}
	return true, s.Send(r)
}
