// Package rlqsapi serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3, RLQS): clients report each bucket's
// usage on a long-lived stream and receive quota assignments that they
// enforce themselves. It translates only: internal/core/quota decides the
// shares.
//
// # From a report to a limit
//
// A stream serves one domain: the domain of its first report (required;
// a later report naming another is InvalidArgument). A BucketId's entries,
// sorted by key, are a descriptor's entries, matched against the domain's
// rules as a request's descriptor is (config.Domain.Match): BucketId
// {name: api, user: alice} is the descriptor [(name, api), (user, alice)].
// Any rule can so be served by quota, with no change to the policy.
//
// What the matched rule answers:
//
//   - its limit (of several, the one of the lowest rate): a share of it,
//     divided among the streams reporting the bucket (package quota), sent
//     as a token_bucket in Envoy's units (FillInterval): max_tokens the
//     burst (quota.Burst), tokens_per_fill per fill_interval of whole
//     seconds (the period's, rounded up); a share of 0 as blanket_rule
//     DENY_ALL;
//   - requests_per_unit 0: DENY_ALL;
//   - unlimited, shadow mode, or no rule (an unknown domain included):
//     ALLOW_ALL, as the per-request APIs allow it.
//
// A bucket is per value, as the per-request buckets are: one per distinct
// BucketId, except that values a share_threshold wildcard matches share
// one bucket.
//
// The domain's quota_fallback (allow, the default; deny; ask) is sent as
// the stream's response header FallbackHeader, for the Go client; Envoy's
// filter takes its own (no_assignment_behavior, expired_assignment_behavior).
//
// Every assignment has a time to live of 1.5 report intervals rounded up
// to whole seconds (quota.TTL; the interval is the time the client says
// elapsed between its reports, at most quota.MaxInterval, DefaultInterval
// until it says), and is renewed in the reply to each report, identical
// while the share holds. When shares change, the streams whose shares
// changed get theirs at once, not at their next report. Policy reloads
// apply at each bucket's next report. A bucket a stream reports with
// nothing asked for RetireAfter is answered with abandon_action, and its
// share released.
//
// # Bounds
//
// A stream may bring MaxStreamBuckets buckets served by quota into the
// server's table, a tenant MaxTenantBuckets (the caller WithTenant names,
// else the stream's domain), all of them MaxBuckets. A bucket beyond any
// of these is answered DENY_ALL for an assignment's life, and the stream
// goes on; the refusals are logged (at most a line a minute) and counted.
// Buckets no limit is divided for are answered without the server's lock;
// the others take it one usage at a time. While MaxPending of a stream's
// answers are unsent, its next usage waits for them.
package rlqsapi

import (
	"context"
	"io"
	"log/slog"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
	"github.com/ratelimitd/ratelimitd/internal/core/reminder"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// DefaultInterval is the report interval assumed for a client until its
// reports say (Envoy's filter takes it from reporting_interval).
const DefaultInterval = time.Second

// ServiceName is the RLQS service's full name.
const ServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// Server is the RLQS service. It is safe for concurrent use.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	policy   func() *config.Policy
	clock    clock.Clock
	bounds   engine.Bounds
	interval time.Duration
	metrics  *metrics.Quota
	drain    <-chan struct{} // closed when streams are to end
	authz    func(ctx context.Context, domain string) error
	daemons  int64 // each limit is divided by it
	ledger   Ledger
	ticking  sync.Mutex // one Tick at a time, with a ledger
	log      *slog.Logger
	down     *reminder.Reminder // the ledger failing
	full     *reminder.Reminder // buckets refused at a bound
	tenant   func(ctx context.Context, domain string) string

	mu      sync.Mutex // guards alloc, streams and table
	alloc   *quota.Allocator
	streams map[string]*stream
	table   table // by allocator key
	ids     atomic.Uint64
}

// bucketInfo is what the allocator's key stands for.
type bucketInfo struct {
	domain string
	id     map[string]string
	rule   string // StatKey
	tenant string // whose report brought it in
}

// Option configures a Server.
type Option func(*Server)

// WithMetrics counts streams, reports and assignments.
func WithMetrics(q *metrics.Quota) Option { return func(s *Server) { s.metrics = q } }

// WithBounds bounds BucketIds as requests' descriptors are bounded: entries
// per BucketId, key and value bytes (zero value: engine.DefaultBounds).
func WithBounds(b engine.Bounds) Option { return func(s *Server) { s.bounds = b } }

// WithDrain ends every stream, with Unavailable, once drain is closed (a
// daemon shutting down), so that clients reconnect elsewhere at once.
func WithDrain(drain <-chan struct{}) Option { return func(s *Server) { s.drain = drain } }

// WithAuthorize has authorize decide, at a stream's first report, whether
// its caller may take shares of domain's limits; its error (a gRPC status)
// ends the stream.
func WithAuthorize(authorize func(ctx context.Context, domain string) error) Option {
	return func(s *Server) { s.authz = authorize }
}

// WithDaemons divides every limit by n, rounded down, for n daemons that
// serve quota streams for the same limits (n <= 1: the whole limit): the
// shares of all of them together never exceed it, however the streams are
// spread among them, but a daemon whose streams ask for more than its
// part cannot borrow another's unused part.
func WithDaemons(n int) Option { return func(s *Server) { s.daemons = int64(max(n, 1)) } }

// Ledger keeps, for daemons that share limits, each one's part of every
// bucket's limit (internal/store/redis: QuotaLedger; quota.Claim and
// quota.Grant say what is asked and answered). Sync answers the claims in
// order, or fails as a whole.
type Ledger interface {
	Sync(ctx context.Context, claims []quota.Claim) ([]quota.Grant, error)
}

// WithLedger shares every limit with the other daemons on the same ledger
// (package quota, "Limits shared by several daemons"): each Tick first
// syncs the buckets whose claims changed, and a bucket's assignments are
// sent only while the ledger's grant is in force; log receives the
// ledger's failures (at most one line a minute while they last) and its
// recovery.
func WithLedger(l Ledger, log *slog.Logger) Option {
	return func(s *Server) { s.ledger, s.log = l, log }
}

// SyncTimeout bounds a Tick's exchange with the ledger.
const SyncTimeout = time.Second

// WithInterval sets the report interval assumed for a client until its
// reports say (0: DefaultInterval; at most quota.MaxInterval).
func WithInterval(d time.Duration) Option { return func(s *Server) { s.interval = d } }

// New returns a server that maps reports to the policy that policy returns
// (the one in force, read at each report), on clock's time.
func New(policy func() *config.Policy, clk clock.Clock, opts ...Option) *Server {
	s := &Server{policy: policy, clock: clk, bounds: engine.DefaultBounds, interval: DefaultInterval, daemons: 1,
		streams: map[string]*stream{}, table: newTable()}
	for _, o := range opts {
		o(s)
	}
	if s.bounds == (engine.Bounds{}) {
		s.bounds = engine.DefaultBounds
	}
	if s.interval <= 0 {
		s.interval = DefaultInterval
	}
	s.interval = min(s.interval, quota.MaxInterval)
	if s.log == nil {
		s.log = slog.Default()
	}
	s.full = reminder.New(clk, 0)
	s.alloc = quota.New(s.interval)
	if s.ledger != nil {
		s.alloc = quota.NewShared(s.interval)
		s.down = reminder.New(clk, 0)
	}
	return s
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, s)
}

// Tick rebalances every bucket now and pushes the shares that changed;
// with a ledger, it syncs with the ledger first.
func (s *Server) Tick() {
	if s.ledger != nil {
		// One tick at a time: grants are set in the order the ledger gave
		// them, and shares move on the grants in force, not claims in flight.
		s.ticking.Lock()
		defer s.ticking.Unlock()
		s.sync()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.push(s.alloc.Tick(s.clock.Now()))
	for k := range s.table.buckets { // forget what the allocator forgot
		if !s.alloc.Has(k) {
			s.table.forget(k)
		}
	}
}

// sync sends the allocator's claims to the ledger and gives it the grants.
// The lock is not held while the ledger answers: reports go on meanwhile
// (the claimed buckets' shares do not grow until the grants are in).
func (s *Server) sync() {
	s.mu.Lock()
	claimedAt := s.clock.Now()
	claims := s.alloc.Claims(claimedAt)
	s.mu.Unlock()
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), SyncTimeout)
	grants, err := s.ledger.Sync(ctx, claims)
	cancel()
	s.metrics.Synced(len(claims), err)
	if err != nil {
		if log, since, n := s.down.Start(); log {
			s.log.Warn("quota: the ledger of shares is unreachable: shares do not grow, and assignments stop being renewed as their grants run out",
				"for", since, "failures", n, "err", err)
		}
		return
	}
	if log, since := s.down.Stop(); log {
		s.log.Info("quota: the ledger of shares answers again", "after", since)
	}
	s.mu.Lock()
	s.alloc.SetPools(claims, grants, claimedAt)
	s.mu.Unlock()
}

// stream is one client's stream: what is to be sent to it, sent by one
// goroutine in order.
type stream struct {
	id, peer string
	domain   string // known domain, for metrics ("" when unknown)
	tenant   string // whose table share its buckets count against
	wake     chan struct{}
	sent     chan struct{} // the sender took what was pending

	mu      sync.Mutex
	pending []*rlqsv3.RateLimitQuotaResponse_BucketAction
	at      map[string]int              // pending's index by idKey
	buckets map[string]*rlqsv3.BucketId // allocator keys it reported
	idle    map[string]time.Duration    // how long each has asked nothing (retire.go)
}

// queue adds an action to send, replacing one pending for the same bucket
// (in its place): what is pending is at most one action per bucket, and
// queueing costs the same however many are pending.
func (st *stream) queue(a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	k := idKey(a.GetBucketId().GetBucket())
	st.mu.Lock()
	if i, ok := st.at[k]; ok {
		st.pending[i] = a
	} else {
		if st.at == nil {
			st.at = map[string]int{}
		}
		st.at[k] = len(st.pending)
		st.pending = append(st.pending, a)
	}
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// idKey names a BucketId whatever the order of its map: its entries
// sorted by key, each quoted.
func idKey(id map[string]string) string {
	var b []byte
	for _, e := range Entries(id) {
		b = strconv.AppendQuote(b, e.Key)
		b = append(b, '=')
		b = strconv.AppendQuote(b, e.Value)
		b = append(b, ' ')
	}
	return string(b)
}

func (st *stream) take() []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	st.mu.Lock()
	p := st.pending
	st.pending = nil
	clear(st.at)
	st.mu.Unlock()
	select {
	case st.sent <- struct{}{}: // for backlog
	default:
	}
	return p
}

// StreamRateLimitQuotas serves one client's stream until it ends.
func (s *Server) StreamRateLimitQuotas(ss rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx := ss.Context()
	st := &stream{id: strconv.FormatUint(s.ids.Add(1), 10), wake: make(chan struct{}, 1), sent: make(chan struct{}, 1), buckets: map[string]*rlqsv3.BucketId{},
		idle: map[string]time.Duration{}}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		st.peer = p.Addr.String()
	}
	s.metrics.StreamOpened()
	defer s.metrics.StreamClosed()
	s.mu.Lock()
	s.streams[st.id] = st
	s.mu.Unlock()
	defer s.closed(st)

	sendErr := make(chan error, 1)
	done := make(chan struct{})
	var sending sync.WaitGroup
	defer func() { close(done); sending.Wait() }() // no Send after the handler returns
	sending.Add(1)
	go func() {
		defer sending.Done()
		for {
			select {
			case <-done:
				return
			case <-st.wake:
				if actions := st.take(); len(actions) > 0 {
					if err := ss.Send(&rlqsv3.RateLimitQuotaResponse{BucketAction: actions}); err != nil {
						sendErr <- err
						return
					}
				}
			}
		}
	}()

	// Recv in a goroutine of its own, so that draining can end the stream.
	type received struct {
		msg *rlqsv3.RateLimitQuotaUsageReports
		err error
	}
	recv := make(chan received)
	go func() {
		for {
			msg, err := ss.Recv()
			select {
			case recv <- received{msg, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var domain string
	for first := true; ; first = false {
		var r received
		select {
		case r = <-recv:
		case err := <-sendErr:
			return err
		case <-s.drain:
			return errDraining
		}
		if r.err == io.EOF {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		msg := r.msg
		if first {
			if msg.GetDomain() == "" {
				return status.Error(codes.InvalidArgument, "domain: empty in the stream's first report (a stream serves the domain its first report names)")
			}
			if len(msg.GetDomain()) > s.bounds.MaxKeyBytes {
				return status.Errorf(codes.InvalidArgument, "domain: %d bytes, more than %d", len(msg.GetDomain()), s.bounds.MaxKeyBytes)
			}
			domain = msg.GetDomain()
			if s.authz != nil {
				if err := s.authz(ctx, domain); err != nil {
					return err
				}
			}
			st.tenant = s.tenantOf(ctx, domain)
			// The policy's quota_fallback, for clients that take it (the Go
			// client); sent with the first response. Envoy ignores it.
			_ = ss.SetHeader(metadata.Pairs(FallbackHeader, s.fallback(domain).String()))
		} else if d := msg.GetDomain(); d != "" && d != domain {
			return status.Errorf(codes.InvalidArgument, "domain: %q, but this stream serves %q (open a stream per domain)", d, domain)
		}
		if err := s.checkUsages(msg.GetBucketQuotaUsages()); err != nil {
			return err
		}
		if err := s.report(ctx, st, domain, msg.GetBucketQuotaUsages()); err != nil {
			return err
		}
	}
}

// FallbackHeader is the stream's response header that names the domain's
// quota_fallback: "allow", "deny" or "ask".
const FallbackHeader = "ratelimitd-quota-fallback"

// fallback returns the domain's quota_fallback (allow for a domain the
// policy does not have).
func (s *Server) fallback(domain string) config.QuotaFallback {
	if policy := s.policy(); policy != nil {
		if d := policy.Domain(domain); d != nil {
			return d.QuotaFallback
		}
	}
	return config.QuotaAllow
}

// checkUsages checks every usage of a report before any is applied.
func (s *Server) checkUsages(usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	for i, u := range usages {
		field := "bucket_quota_usages[" + strconv.Itoa(i) + "]"
		b := u.GetBucketId().GetBucket()
		if len(b) == 0 {
			return status.Errorf(codes.InvalidArgument, "%s.bucket_id: empty (a bucket is named by at least one key)", field)
		}
		if len(b) > s.bounds.MaxEntries {
			return status.Errorf(codes.InvalidArgument, "%s.bucket_id: %d keys, more than %d", field, len(b), s.bounds.MaxEntries)
		}
		for k, v := range b {
			switch {
			case k == "":
				return status.Errorf(codes.InvalidArgument, "%s.bucket_id.bucket: an empty key", field)
			case len(k) > s.bounds.MaxKeyBytes:
				return status.Errorf(codes.InvalidArgument, "%s.bucket_id.bucket: key of %d bytes, more than %d", field, len(k), s.bounds.MaxKeyBytes)
			case len(v) > s.bounds.MaxValueBytes:
				return status.Errorf(codes.InvalidArgument, "%s.bucket_id.bucket[%q]: value of %d bytes, more than %d", field, k, len(v), s.bounds.MaxValueBytes)
			}
		}
		if el := u.GetTimeElapsed(); el != nil && (el.CheckValid() != nil || el.AsDuration() < 0) {
			return status.Errorf(codes.InvalidArgument, "%s.time_elapsed: not a duration of zero or more", field)
		}
	}
	return nil
}

// Entries returns a BucketId's entries as a descriptor's: sorted by key.
func Entries(id map[string]string) []config.Entry {
	entries := make([]config.Entry, 0, len(id))
	for k, v := range id {
		entries = append(entries, config.Entry{Key: k, Value: v})
	}
	slices.SortFunc(entries, func(a, b config.Entry) int { return strings.Compare(a.Key, b.Key) })
	return entries
}

// report applies a report's usages and queues the replies and pushes.
// Each usage is answered on its own: a bucket no limit is divided for
// (no rule, unlimited, DENY_ALL) without the server's lock, a bucket
// served by quota under it, one at a time, so that a large report does not
// hold other streams' reports up; and while the stream's answers are
// MaxPending or more unsent, the next usage waits for them (backlog).
func (s *Server) report(ctx context.Context, st *stream, domain string, usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	var d *config.Domain
	if policy := s.policy(); policy != nil { // nil before an xDS policy arrives
		d = policy.Domain(domain)
	}
	known := ""
	if d != nil {
		known = domain
	}
	s.mu.Lock()
	st.domain = known // read by pushes, under s.mu
	s.mu.Unlock()
	for i, u := range usages {
		if err := s.backlog(ctx, st); err != nil {
			return err
		}
		s.metrics.Reported(known)
		id := u.GetBucketId()
		entries := Entries(id.GetBucket())
		elapsed := u.GetTimeElapsed().AsDuration()
		rule := d.Match(entries)
		limit, blanket := ruleLimit(rule)
		if limit == nil {
			s.send(st, blanketAction(id, blanket, s.ttl(elapsed)))
			continue
		}
		key := bucketKey(domain, entries, rule, limit)
		ql := quota.Limit{Requests: limit.Rate.Requests() / s.daemons, Period: limit.Rate.Period()}
		asked := quota.Asked(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied())
		s.mu.Lock()
		if s.retire(st, key, id, asked, elapsed, s.clock.Now()) {
			s.mu.Unlock()
			continue
		}
		if why := s.refusal(st, key); why != "" {
			s.refuse(st, id, "bucket_quota_usages["+strconv.Itoa(i)+"]: "+why, elapsed)
			s.mu.Unlock()
			continue
		}
		s.table.keep(key, bucketInfo{domain: domain, id: id.GetBucket(), rule: rule.StatKey, tenant: st.tenant})
		st.mu.Lock()
		st.buckets[key] = id // for pushes, the reply's included
		st.mu.Unlock()
		a, ok, pushes := s.alloc.Report(key, ql, st.id, asked, elapsed, s.clock.Now())
		if ok { // else pushed once the ledger has answered (a shared limit)
			s.send(st, shareAction(id, a))
		}
		s.push(pushes)
		s.mu.Unlock()
	}
	return nil
}

// push sends each push to its stream, if it is still open. s.mu is held.
func (s *Server) push(pushes []quota.Push) {
	for _, p := range pushes {
		st := s.streams[p.Client]
		if st == nil {
			continue
		}
		st.mu.Lock()
		id := st.buckets[p.Bucket]
		st.mu.Unlock()
		if id != nil {
			s.send(st, shareAction(id, p.Assignment))
		}
	}
}

// send queues an action for st and counts it.
func (s *Server) send(st *stream, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	action := "share"
	if a.GetAbandonAction() != nil {
		action = "abandon"
	} else if b := a.GetQuotaAssignmentAction().GetRateLimitStrategy(); b.GetTokenBucket() == nil {
		action = "allow_all"
		if b.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
			action = "deny_all"
		}
	}
	s.metrics.Assigned(st.domain, action)
	st.queue(a)
}

// closed forgets a stream: its shares stay committed until they expire.
func (s *Server) closed(st *stream) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.streams, st.id)
	st.mu.Lock()
	keys := make([]string, 0, len(st.buckets))
	for k := range st.buckets {
		keys = append(keys, k)
	}
	st.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		s.push(s.alloc.Gone(k, st.id, now))
	}
}

// ruleLimit returns the limit of rule that quota divides (the lowest rate
// of its limits), or nil and the blanket rule that answers for it.
func ruleLimit(rule *config.Rule) (*config.Limit, typev3.RateLimitStrategy_BlanketRule) {
	if rule == nil || rule.ShadowMode {
		return nil, typev3.RateLimitStrategy_ALLOW_ALL
	}
	var lowest *config.Limit
	for _, l := range rule.Limits {
		switch {
		case l.DenyAll:
			return nil, typev3.RateLimitStrategy_DENY_ALL
		case l.Unlimited:
		case lowest == nil || lowerRate(&l.Rate, &lowest.Rate):
			lowest = l
		}
	}
	if lowest == nil {
		return nil, typev3.RateLimitStrategy_ALLOW_ALL
	}
	return lowest, 0
}

// lowerRate reports whether a's requests per period are fewer than b's.
type rate interface {
	Requests() int64
	Period() time.Duration
}

func lowerRate(a, b rate) bool {
	// a.r / a.p < b.r / b.p  ⇔  a.r × b.p < b.r × a.p, in 128 bits.
	ah, al := bits.Mul64(uint64(a.Requests()), uint64(b.Period()))
	bh, bl := bits.Mul64(uint64(b.Requests()), uint64(a.Period()))
	return ah < bh || ah == bh && al < bl
}

// bucketKey names a bucket for the allocator: the domain, the entries
// (a share_threshold value as its pattern), the limit's key, each quoted.
func bucketKey(domain string, entries []config.Entry, rule *config.Rule, limit *config.Limit) string {
	b := strconv.AppendQuote(nil, domain)
	for i, e := range entries {
		v := e.Value
		if i < len(rule.Shared) && rule.Shared[i] != "" {
			v = rule.Shared[i]
		}
		b = append(b, ' ')
		b = strconv.AppendQuote(b, e.Key)
		b = append(b, '=')
		b = strconv.AppendQuote(b, v)
	}
	b = append(b, ' ')
	return string(strconv.AppendQuote(b, limit.Key))
}

func blanketAction(id *rlqsv3.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return assignment(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, ttl)
}

// shareAction is a share as Envoy's token bucket (FillInterval): at most
// Burst tokens, tokens_per_fill per whole-seconds fill_interval; DENY_ALL
// for a share of 0.
func shareAction(id *rlqsv3.BucketId, a quota.Assignment) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	if a.Share <= 0 {
		return blanketAction(id, typev3.RateLimitStrategy_DENY_ALL, a.TTL)
	}
	tokens, every := FillInterval(a.Share, a.Period)
	return assignment(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(min(a.Burst, math.MaxUint32)),
		TokensPerFill: wrapperspb.UInt32(tokens),
		FillInterval:  durationpb.New(every),
	}}}, a.TTL)
}

// FillInterval returns a share of share requests per period as Envoy's
// filter reads a token bucket: tokens per interval, the interval in whole
// seconds (Envoy takes its whole seconds only, and fills
// tokens_per_fill / seconds tokens a second, continuously). The interval
// is the period rounded up to whole seconds, the same for every share of
// a limit (Envoy keeps its token bucket when max_tokens, tokens_per_fill
// and the nanoseconds of fill_interval are unchanged, whatever its
// seconds); tokens is share × interval / period rounded down, so never
// faster than the share, exact when the period is whole seconds, and at
// most math.MaxUint32 (slower then). A share of at least 1 gets at least 1
// token.
func FillInterval(share int64, period time.Duration) (uint32, time.Duration) {
	period = max(period, 1)
	every := math.MaxInt64 / time.Second * time.Second // for periods of some 292 years
	if period <= every {
		every = (period + time.Second - 1) / time.Second * time.Second
	}
	// ⌊share × every / period⌋ in 128 bits.
	hi, lo := bits.Mul64(uint64(max(share, 0)), uint64(every))
	if hi >= uint64(period) {
		return math.MaxUint32, every
	}
	q, _ := bits.Div64(hi, lo, uint64(period))
	return uint32(min(max(q, 1), math.MaxUint32)), every
}

func assignment(id *rlqsv3.BucketId, strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    strategy,
			},
		},
	}
}

// BucketView is one bucket served by quota, for the console.
type BucketView struct {
	Domain string            `json:"domain"`
	Bucket map[string]string `json:"bucket_id"`
	Rule   string            `json:"rule"`
	quota.BucketView
	Peers map[string]string `json:"peers"` // stream id -> its peer address
}

// View returns the buckets served by quota now, their streams, demands and
// shares.
func (s *Server) View() []BucketView {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var views []BucketView
	for _, b := range s.alloc.View(now) {
		info := s.table.buckets[b.Bucket]
		v := BucketView{Domain: info.domain, Bucket: info.id, Rule: info.rule, BucketView: b, Peers: map[string]string{}}
		for _, c := range b.Clients {
			if st := s.streams[c.Client]; st != nil {
				v.Peers[c.Client] = st.peer
			}
		}
		views = append(views, v)
	}
	return views
}
