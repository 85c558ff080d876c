// Package grpcapi serves the project's own API, ratelimit.v1, by
// translating its messages to and from the engine's. It decides nothing.
package grpcapi

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcstatus"
	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// Server implements ratelimit.v1.RateLimitService on an engine.
type Server struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
	engine *engine.Engine
}

// Register serves ratelimit.v1.RateLimitService on g, backed by e.
func Register(g grpc.ServiceRegistrar, e *engine.Engine) {
	ratelimitv1.RegisterRateLimitServiceServer(g, &Server{engine: e})
}

// ShouldRateLimit implements ratelimit.v1.RateLimitService.
func (s *Server) ShouldRateLimit(ctx context.Context, in *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	req, err := request(in)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var resp engine.Response
	if err := s.engine.ShouldRateLimit(ctx, req, &resp); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return response(&resp), nil
}

var algorithmOf = map[ratelimitv1.Algorithm]algorithms.Algorithm{
	ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED:        algorithms.FixedWindow,
	ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW:       algorithms.FixedWindow,
	ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW:     algorithms.SlidingWindow,
	ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET:       algorithms.TokenBucket,
	ratelimitv1.Algorithm_ALGORITHM_LEAKY_BUCKET:       algorithms.LeakyBucket,
	ratelimitv1.Algorithm_ALGORITHM_LEAKY_BUCKET_QUEUE: algorithms.LeakyBucketQueue,
	ratelimitv1.Algorithm_ALGORITHM_CONCURRENCY:        algorithms.Concurrency,
}

var algorithmTo = func() map[algorithms.Algorithm]ratelimitv1.Algorithm {
	m := make(map[algorithms.Algorithm]ratelimitv1.Algorithm)
	for pb, a := range algorithmOf {
		if pb != ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED {
			m[a] = pb
		}
	}
	return m
}()

// operationOf translates a descriptor's operation.
var operationOf = map[ratelimitv1.Operation]engine.Op{
	ratelimitv1.Operation_OPERATION_UNSPECIFIED: engine.OpCharge,
	ratelimitv1.Operation_OPERATION_CHARGE:      engine.OpCharge,
	ratelimitv1.Operation_OPERATION_CHECK:       engine.OpCheck,
	ratelimitv1.Operation_OPERATION_REFUND:      engine.OpRefund,
}

// overdraftOf translates whether a descriptor's charge may overdraw.
var overdraftOf = map[ratelimitv1.Overdraft]engine.Overdraft{
	ratelimitv1.Overdraft_OVERDRAFT_UNSPECIFIED: engine.OverdraftPolicy,
	ratelimitv1.Overdraft_OVERDRAFT_POLICY:      engine.OverdraftPolicy,
	ratelimitv1.Overdraft_OVERDRAFT_NEVER:       engine.OverdraftNever,
	ratelimitv1.Overdraft_OVERDRAFT_ALWAYS:      engine.OverdraftAlways,
}

// request translates a v1 request. It rejects only what the engine's types
// cannot hold (an unknown algorithm, operation or overdraft, an unrepresentable
// period); the engine validates the rest.
func request(in *ratelimitv1.ShouldRateLimitRequest) (*engine.Request, error) {
	req := &engine.Request{
		Domain:      in.GetDomain(),
		Hits:        uint64(in.GetHits()),
		Descriptors: make([]engine.Descriptor, len(in.GetDescriptors())),
	}
	for i, d := range in.GetDescriptors() {
		out := &req.Descriptors[i]
		out.Entries = make([]config.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			out.Entries[j] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if d.Hits != nil {
			h := uint64(d.GetHits())
			out.Hits = &h
		}
		op, ok := operationOf[d.GetOperation()]
		if !ok {
			return nil, fmt.Errorf("descriptors[%d].operation: unknown value %d", i, d.GetOperation())
		}
		out.Op = op
		if out.Overdraft, ok = overdraftOf[d.GetOverdraft()]; !ok {
			return nil, fmt.Errorf("descriptors[%d].overdraft: unknown value %d", i, d.GetOverdraft())
		}
		if l := d.GetLimit(); l != nil {
			alg, ok := algorithmOf[l.GetAlgorithm()]
			if !ok {
				return nil, fmt.Errorf("descriptors[%d].limit.algorithm: unknown value %d", i, l.GetAlgorithm())
			}
			if p := l.GetPeriod(); p != nil {
				if err := p.CheckValid(); err != nil {
					return nil, fmt.Errorf("descriptors[%d].limit.period: %v", i, err)
				}
			}
			out.Limit = &engine.InlineLimit{
				Name:      l.GetName(),
				Algorithm: alg,
				Requests:  int64(l.GetRequests()),
				Period:    l.GetPeriod().AsDuration(),
				Burst:     int64(l.GetBurst()),
			}
		}
	}
	return req, nil
}

var codeTo = map[algorithms.Code]ratelimitv1.Code{
	algorithms.Allowed:      ratelimitv1.Code_CODE_OK,
	algorithms.Denied:       ratelimitv1.Code_CODE_OVER_LIMIT,
	algorithms.OverCapacity: ratelimitv1.Code_CODE_OVER_CAPACITY,
}

func response(r *engine.Response) *ratelimitv1.ShouldRateLimitResponse {
	out := &ratelimitv1.ShouldRateLimitResponse{
		OverallCode: codeTo[r.Code],
		Statuses:    make([]*ratelimitv1.DescriptorStatus, len(r.Statuses)),
	}
	if r.Code != algorithms.Allowed && !r.Never {
		out.RetryAfter = durationpb.New(r.RetryAfter)
	}
	for i := range r.Statuses {
		st := &r.Statuses[i]
		ds := &ratelimitv1.DescriptorStatus{
			Code:      codeTo[st.Code],
			Matched:   st.Matched,
			Remaining: uint64(st.Remaining),
			Shadow:    st.Shadow,
			Overdrew:  st.Overdrew,
		}
		if st.Limit != nil {
			ds.Rule = rule(st.Limit)
			ds.ResetAfter = durationpb.New(st.ResetAfter)
		}
		if st.Code == algorithms.Denied {
			ds.RetryAfter = durationpb.New(st.RetryAfter)
		}
		if st.Delay > 0 {
			ds.Delay = durationpb.New(st.Delay)
		}
		if st.Rule != nil {
			ds.Metadata = st.Rule.Metadata
		}
		if st.Scope > 0 {
			scope := uint32(st.Scope)
			ds.Scope = &scope
		}
		out.Statuses[i] = ds
	}
	out.MostRestrictive = uint32(r.MostRestrictive() + 1)
	out.Metadata = r.Metadata()
	if len(r.Scopes) > 0 {
		out.Quotas = &ratelimitv1.Quotas{}
		for g, sc := range r.Scopes {
			qs := &ratelimitv1.QuotaScope{Room: sc.Room, Metadata: r.ScopeMetadata(g)}
			for _, e := range sc.Entries {
				qs.Entries = append(qs.Entries, &ratelimitv1.Entry{Key: e.Key, Value: e.Value})
			}
			out.Quotas.Scopes = append(out.Quotas.Scopes, qs)
		}
	}
	return out
}

func rule(l *config.Limit) *ratelimitv1.Rule {
	if l.Unlimited {
		return &ratelimitv1.Rule{Name: l.Name, Unlimited: true}
	}
	return &ratelimitv1.Rule{
		Name:      l.Name,
		Algorithm: algorithmTo[l.Rate.Algorithm()],
		Requests:  uint32(l.Rate.Requests()),
		Period:    durationpb.New(l.Rate.Period()),
		Burst:     uint32(l.Rate.Burst()),
	}
}
