// Package rlqsapi serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3, RLQS) on the quota service
// (internal/engine/quotaservice, which decides what every bucket gets):
// clients report each bucket's usage on a long-lived stream and receive
// assignments that they enforce themselves. It translates only: a stream
// is a quotaservice.Client, a BucketQuotaUsage a quotaservice.Usage, and
// an Action a BucketAction.
//
// # The stream
//
// A stream serves one domain: the domain of its first report (required,
// at most engine.Bounds.MaxKeyBytes; a later report naming another is
// InvalidArgument). Its caller is authorized for the domain (WithAuthorize)
// at that first report, and named as the tenant its buckets count against
// (WithTenant). A BucketId's entries, sorted by key, are the bucket's
// descriptor (BucketId {name: api, user: alice} is the descriptor
// [(name, api), (user, alice)]): a report whose BucketId or time_elapsed is out of bounds
// (engine.Bounds.CheckEntries, as requests' descriptors are bounded) is
// InvalidArgument naming the field, and none of its usages is applied.
//
// The domain's quota_fallback (allow, the default; deny; ask) is sent as
// the stream's response header FallbackHeader, for the Go client; Envoy's
// filter takes its own (no_assignment_behavior,
// expired_assignment_behavior).
//
// # Actions
//
// A share is sent as a token_bucket in Envoy's units (FillInterval):
// max_tokens the burst (quota.Burst), tokens_per_fill per fill_interval of
// whole seconds (the period's, rounded up); AllowAll and DenyAll as
// blanket_rule ALLOW_ALL and DENY_ALL; each with its time to live as
// assignment_time_to_live; Abandon as abandon_action. The actions pending
// for a stream are sent together, one response per wake of its sender.
//
// WithDrain ends every stream with Unavailable, so that clients reconnect
// elsewhere at once.
package rlqsapi

import (
	"context"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
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

	"github.com/ratelimitd/ratelimitd/internal/core/quota"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// ServiceName is the RLQS service's full name.
const ServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// Server is the RLQS service. It is safe for concurrent use.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	quota   *quotaservice.Service
	bounds  engine.Bounds
	metrics *metrics.Quota
	drain   <-chan struct{} // closed when streams are to end
	authz   func(ctx context.Context, domain string) error
	tenant  func(ctx context.Context, domain string) string
}

// Option configures a Server.
type Option func(*Server)

// WithMetrics counts the streams open (the service counts the rest:
// quotaservice.WithObserver).
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

// WithTenant has tenant name, at a stream's first report, the caller that
// its buckets count against (quotaservice.MaxTenantBuckets): "" for a
// caller it cannot tell apart from others, whose streams count against
// their domain. Without it every stream counts against its domain.
func WithTenant(tenant func(ctx context.Context, domain string) string) Option {
	return func(s *Server) { s.tenant = tenant }
}

// New returns the RLQS service of q.
func New(q *quotaservice.Service, opts ...Option) *Server {
	s := &Server{quota: q, bounds: engine.DefaultBounds}
	for _, o := range opts {
		o(s)
	}
	if s.bounds == (engine.Bounds{}) {
		s.bounds = engine.DefaultBounds
	}
	return s
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, s)
}

var errDraining = status.Error(codes.Unavailable, "ratelimitd is shutting down: reconnect to report again")

// StreamRateLimitQuotas serves one client's stream until it ends: a
// goroutine receives its reports, another sends its actions, and this one
// applies the reports in order.
func (s *Server) StreamRateLimitQuotas(ss rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	s.metrics.StreamOpened()
	defer s.metrics.StreamClosed()
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)
	s.cancelOnDrain(ctx, cancel)
	recv := receive(ctx, ss)
	msg, err := s.next(recv, nil)
	if msg == nil {
		return err
	}
	domain := msg.GetDomain()
	c, err := s.open(ctx, ss, domain)
	if err != nil {
		return err
	}
	defer c.Close()
	sendErr := make(chan error, 1)
	var sending sync.WaitGroup
	sending.Go(func() { sendActions(ctx, ss, c, sendErr) })
	defer func() { cancel(nil); sending.Wait() }() // no Send after the handler returns, nor after c closes
	for {
		if err := s.report(ctx, c, domain, msg); err != nil {
			return err
		}
		if msg, err = s.next(recv, sendErr); msg == nil {
			return err
		}
	}
}

// cancelOnDrain cancels ctx with errDraining when the server drains.
func (s *Server) cancelOnDrain(ctx context.Context, cancel context.CancelCauseFunc) {
	if s.drain == nil {
		return
	}
	go func() {
		select {
		case <-s.drain:
			cancel(errDraining)
		case <-ctx.Done():
		}
	}()
}

// received is what one Recv returned.
type received struct {
	msg *rlqsv3.RateLimitQuotaUsageReports
	err error
}

// receive calls Recv in a goroutine of its own, so that draining can end
// the stream, until Recv fails or ctx ends.
func receive(ctx context.Context, ss rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) <-chan received {
	recv := make(chan received)
	go func() {
		for {
			msg, err := ss.Recv()
			select {
			case recv <- received{msg, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return recv
}

// next returns the stream's next report, or nil and what ends the stream:
// nil when the client closed it, its Recv's or Send's error, errDraining.
func (s *Server) next(recv <-chan received, sendErr <-chan error) (*rlqsv3.RateLimitQuotaUsageReports, error) {
	select {
	case r := <-recv:
		if r.err == io.EOF {
			return nil, nil
		}
		if r.err != nil {
			return nil, r.err
		}
		return r.msg, nil
	case err := <-sendErr:
		return nil, err
	case <-s.drain:
		return nil, errDraining
	}
}

// open starts serving domain, the stream's first report's: the domain
// checked, the caller authorized, the domain's quota_fallback sent as a
// header (for clients that take it, the Go client; Envoy ignores it), and
// the stream's client opened.
func (s *Server) open(ctx context.Context, ss grpc.ServerStream, domain string) (*quotaservice.Client, error) {
	if domain == "" {
		return nil, status.Error(codes.InvalidArgument, "domain: empty in the stream's first report (a stream serves the domain its first report names)")
	}
	if len(domain) > s.bounds.MaxKeyBytes {
		return nil, status.Errorf(codes.InvalidArgument, "domain: %d bytes, more than %d", len(domain), s.bounds.MaxKeyBytes)
	}
	if s.authz != nil {
		if err := s.authz(ctx, domain); err != nil {
			return nil, err
		}
	}
	caller := ""
	if s.tenant != nil {
		caller = s.tenant(ctx, domain)
	}
	_ = ss.SetHeader(metadata.Pairs(FallbackHeader, s.quota.Fallback(domain).String()))
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	return s.quota.Open(addr, domain, caller), nil
}

// FallbackHeader is the stream's response header that names the domain's
// quota_fallback: "allow", "deny" or "ask".
const FallbackHeader = "ratelimitd-quota-fallback"

// report applies one report of a stream of domain.
func (s *Server) report(ctx context.Context, c *quotaservice.Client, domain string, msg *rlqsv3.RateLimitQuotaUsageReports) error {
	if d := msg.GetDomain(); d != "" && d != domain {
		return status.Errorf(codes.InvalidArgument, "domain: %q, but this stream serves %q (open a stream per domain)", d, domain)
	}
	usages, err := s.usages(msg.GetBucketQuotaUsages())
	if err != nil {
		return err
	}
	if err := c.Report(ctx, usages); err != nil {
		if cause := context.Cause(ctx); cause == errDraining {
			return errDraining
		}
		return status.FromContextError(err).Err()
	}
	return nil
}

// usages translates a report's usages, checking every one before any is
// applied.
func (s *Server) usages(in []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) ([]quotaservice.Usage, error) {
	out := make([]quotaservice.Usage, len(in))
	for i, u := range in {
		bucket := u.GetBucketId().GetBucket()
		entries := entriesOf(bucket)
		if len(entries) <= s.bounds.MaxEntries { // else refused for their number, unsorted
			sortEntries(entries)
		}
		if err := checkEntries(i, entries, s.bounds.CheckEntries(entries)); err != nil {
			return nil, err
		}
		el := u.GetTimeElapsed()
		if el != nil && (el.CheckValid() != nil || el.AsDuration() < 0) {
			return nil, status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].time_elapsed: not a duration of zero or more", i)
		}
		out[i] = quotaservice.Usage{Bucket: bucket, Entries: entries, Elapsed: el.AsDuration(),
			Asked: quota.Asked(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied())}
	}
	return out, nil
}

// checkEntries is the InvalidArgument for the fault f of the entries of
// usage i, nil for none.
func checkEntries(i int, entries []config.Entry, f engine.EntriesFault) error {
	field := "bucket_quota_usages[" + strconv.Itoa(i) + "]"
	switch f.Problem {
	case engine.NoEntries:
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id: empty (a bucket is named by at least one key)", field)
	case engine.TooManyEntries:
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id: %d keys, more than %d", field, f.Got, f.Limit)
	case engine.EmptyKey:
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id.bucket: an empty key", field)
	case engine.LongKey:
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id.bucket: key of %d bytes, more than %d", field, f.Got, f.Limit)
	case engine.LongValue:
		return status.Errorf(codes.InvalidArgument, "%s.bucket_id.bucket[%q]: value of %d bytes, more than %d", field, entries[f.Entry].Key, f.Got, f.Limit)
	}
	return nil
}

// Entries returns a BucketId's entries as a descriptor's: sorted by key.
func Entries(id map[string]string) []config.Entry {
	entries := entriesOf(id)
	sortEntries(entries)
	return entries
}

func entriesOf(id map[string]string) []config.Entry {
	entries := make([]config.Entry, 0, len(id))
	for k, v := range id {
		entries = append(entries, config.Entry{Key: k, Value: v})
	}
	return entries
}

func sortEntries(entries []config.Entry) {
	slices.SortFunc(entries, func(a, b config.Entry) int { return strings.Compare(a.Key, b.Key) })
}

// sendActions sends c's actions as they are queued, until ctx ends or a
// Send fails (its error then goes to sendErr).
func sendActions(ctx context.Context, ss rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer, c *quotaservice.Client, sendErr chan<- error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Ready():
			actions := c.Take()
			if len(actions) == 0 {
				continue
			}
			resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, len(actions))}
			for i := range actions {
				resp.BucketAction[i] = bucketAction(&actions[i])
			}
			if err := ss.Send(resp); err != nil {
				sendErr <- err
				return
			}
		}
	}
}

// bucketAction is a as Envoy's BucketAction.
func bucketAction(a *quotaservice.Action) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	id := &rlqsv3.BucketId{Bucket: a.Bucket}
	switch a.Kind {
	case quotaservice.Share:
		return shareAction(id, a.Assignment)
	case quotaservice.AllowAll:
		return blanketAction(id, typev3.RateLimitStrategy_ALLOW_ALL, a.Assignment.TTL)
	case quotaservice.DenyAll:
		return blanketAction(id, typev3.RateLimitStrategy_DENY_ALL, a.Assignment.TTL)
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

func blanketAction(id *rlqsv3.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return assignment(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, ttl)
}

// shareAction is a share (of at least 1) as Envoy's token bucket
// (FillInterval): at most Burst tokens, tokens_per_fill per whole-seconds
// fill_interval.
func shareAction(id *rlqsv3.BucketId, a quota.Assignment) *rlqsv3.RateLimitQuotaResponse_BucketAction {
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
