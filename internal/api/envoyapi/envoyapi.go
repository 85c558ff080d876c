// Package envoyapi serves Envoy's external rate limit service,
// envoy.service.ratelimit.v3.RateLimitService, with the messages of
// github.com/envoyproxy/go-control-plane, by translating them to and from
// the engine's. It decides nothing: matching, charging (by the store's
// settle rule: see package store), peeks, replaces, unlimited and shadow
// rules are the engine's, shared with ratelimit.v1.
//
// # Request
//
//   - domain and descriptors[].entries are the engine's domain and entries.
//     An empty domain, no descriptors, a descriptor without entries, an
//     empty key or a request beyond the engine's bounds is InvalidArgument,
//     with a message naming the field (upstream answers UNKNOWN or matches
//     nothing).
//   - hits_addend is the cost charged to each descriptor without its own;
//     0 means 1.
//   - descriptors[].hits_addend, when set, is that descriptor's cost and
//     wins over the request's. Set to 0 it is a check (engine.OpCheck), as
//     Envoy Gateway's cost.request and Envoy AI Gateway send it before a
//     request whose cost is known only afterwards: OVER_LIMIT when a
//     charge of 1 would be denied right now (the budget spent, or in debt),
//     with Retry-After the exact wait for that charge, OK otherwise;
//     nothing is charged. (The request-level
//     hits_addend 0 still means 1.) Upstream answers such a check
//     OVER_LIMIT only once its counter is past the limit, not when it is
//     exactly at it; see docs/envoy.md.
//   - a charge (hits_addend > 0) to a limit that takes overdraft
//     (overdraft: true, or --overdraft-by-default) is taken in full,
//     leaving the bucket in debt if need be: the stream-done charge of the
//     tokens a response used always lands. Its status is OVER_LIMIT when
//     it leaves the bucket in debt, as upstream's is once its counter
//     passes the limit; Envoy ignores the answer to it.
//   - descriptors[].limit, an override, replaces the policy's rule for that
//     descriptor with a fixed window of requests_per_unit per
//     unit_multiplier × unit (a month is 30 days, a year 365), counted per
//     descriptor and override. As upstream, it applies only in a domain the
//     policy has: in an unknown domain the descriptor is unmatched. An
//     override of 0 requests, of an UNKNOWN unit or of unit_multiplier 0 is
//     InvalidArgument.
//   - descriptors[].is_negative_hits: true makes the descriptor's cost a
//     refund (engine.OpRefund): that many units are given back, never past
//     the bucket's rest state (a full bucket, an empty window). A refund is
//     always OK.
//
// # Response
//
// overall_code is OVER_LIMIT when the engine denies the request — when any
// descriptor that is not in a shadow_mode rule is over its limit — and OK
// otherwise, also when global shadow mode (engine.WithShadowMode) admitted a
// request it would have denied. What an OVER_LIMIT request charged follows
// the store's settle rule. statuses has one entry per descriptor, in
// request order:
//
//   - unmatched (no rule, unknown domain, or every limit of its rule
//     replaced by another matched rule's replaces): code OK and nothing
//     else, as upstream.
//   - unlimited: code OK and limit_remaining 4294967295, no current_limit.
//   - otherwise the deciding limit's (the engine's Status.Limit): code
//     OVER_LIMIT when it denied the descriptor, else OK; a shadow_mode rule
//     is always OK, as upstream, its limit_remaining still what its bucket
//     holds. current_limit is the limit (see below), limit_remaining what a
//     request of cost 1 could still take now (after this request's charge,
//     if admitted; at most 4294967295), and duration_until_reset how long
//     until the bucket is back at rest — the window empty, the bucket full
//     — if nothing else arrives (0 when it already is).
//
// current_limit has the rule's name, requests_per_unit and unit as the
// policy file wrote them: requests_per_unit is the rate's requests, not a
// token bucket's burst. A period of several units (unit_multiplier in the
// policy file, or in an override) is shown as that unit with
// current_limit.unit_multiplier set to the count: 5 minutes is MINUTE with
// unit_multiplier 5; unit_multiplier is omitted when it is 1. An override's
// status echoes the override as sent. A limit that has a period but no unit
// (possible only for limits made in code) is shown in the longest unit that
// divides it exactly, or in seconds rounded up. A requests_per_unit: 0 rule
// (deny every request) shows 0.
//
// A cost larger than a limit's capacity, which no wait admits, is
// OVER_LIMIT like any other denial; v3 has no code of its own for it, and
// no Retry-After is sent for it. A leaky_bucket_queue admits requests as
// leaky_bucket does: v3 has no field for the delay that would space them.
//
// Response headers are optional: see Headers. So is dynamic_metadata, as
// upstream's: see WithDynamicMetadata.
package envoyapi

import (
	"context"
	"fmt"
	"math"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/internal/api/grpcstatus"
	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// Server implements envoy.service.ratelimit.v3.RateLimitService on an
// engine.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	engine   *engine.Engine
	headers  Headers
	metadata bool // WithDynamicMetadata
}

// Option configures a Server.
type Option func(*Server)

// WithHeaders selects the response headers (default HeadersOff).
func WithHeaders(h Headers) Option { return func(s *Server) { s.headers = h } }

// Register serves envoy.service.ratelimit.v3.RateLimitService on g, backed
// by e.
func Register(g grpc.ServiceRegistrar, e *engine.Engine, opts ...Option) {
	s := &Server{engine: e}
	for _, opt := range opts {
		opt(s)
	}
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// ServiceName is the full name of the service Register serves.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService.
func (s *Server) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	req, err := request(in)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var resp engine.Response
	if err := s.engine.ShouldRateLimit(ctx, req, &resp); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return s.response(in, &resp), nil
}

// request translates an Envoy request. It rejects only what the engine's
// types cannot hold (an override whose unit is not a period); the engine
// validates the rest. The engine's field names are Envoy's too.
func request(in *rlsv3.RateLimitRequest) (*engine.Request, error) {
	req := &engine.Request{
		Domain:            in.GetDomain(),
		Hits:              uint64(in.GetHitsAddend()),
		InlineNeedsDomain: true,
		Descriptors:       make([]engine.Descriptor, len(in.GetDescriptors())),
	}
	for i, d := range in.GetDescriptors() {
		out := &req.Descriptors[i]
		out.Entries = make([]config.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			out.Entries[j] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			out.Hits = &v
			if v == 0 {
				out.Op = engine.OpCheck
			}
		}
		if d.GetIsNegativeHits() {
			out.Op = engine.OpRefund
		}
		if o := d.GetLimit(); o != nil {
			period, err := overridePeriod(o)
			if err != nil {
				return nil, fmt.Errorf("descriptors[%d].limit.%v", i, err)
			}
			out.Limit = &engine.InlineLimit{
				Algorithm: algorithms.FixedWindow,
				Requests:  int64(o.GetRequestsPerUnit()),
				Period:    period,
			}
		}
	}
	return req, nil
}

// overrideUnits are the units an override may name, as the policy's units
// (so that a month and a year last as long as in a policy file).
var overrideUnits = map[typev3.RateLimitUnit]config.Unit{
	typev3.RateLimitUnit_SECOND: config.UnitSecond,
	typev3.RateLimitUnit_MINUTE: config.UnitMinute,
	typev3.RateLimitUnit_HOUR:   config.UnitHour,
	typev3.RateLimitUnit_DAY:    config.UnitDay,
	typev3.RateLimitUnit_MONTH:  config.UnitMonth,
	typev3.RateLimitUnit_YEAR:   config.UnitYear,
}

// overridePeriod returns unit_multiplier × unit. A period too long for a
// Duration is returned as the longest Duration, which the engine rejects
// with the longest period it accepts.
func overridePeriod(o *rlcommonv3.RateLimitDescriptor_RateLimitOverride) (time.Duration, error) {
	u, ok := overrideUnits[o.GetUnit()]
	if !ok {
		return 0, fmt.Errorf("unit: %v is not a unit (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", o.GetUnit())
	}
	d := u.Duration()
	m := o.GetUnitMultiplier()
	if m == nil {
		return d, nil
	}
	if m.GetValue() == 0 {
		return 0, fmt.Errorf("unit_multiplier: must be at least 1")
	}
	if int64(m.GetValue()) > math.MaxInt64/int64(d) {
		return math.MaxInt64, nil
	}
	return d * time.Duration(m.GetValue()), nil
}

func (s *Server) response(in *rlsv3.RateLimitRequest, r *engine.Response) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.Statuses)),
	}
	if r.Code != algorithms.Allowed {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i := range r.Statuses {
		out.Statuses[i] = descriptorStatus(&r.Statuses[i], in.GetDescriptors()[i].GetLimit())
	}
	out.ResponseHeadersToAdd = s.headers.headers(r, out)
	if s.metadata {
		out.DynamicMetadata = dynamicMetadata(in, r, out.Statuses)
	}
	return out
}

// descriptorStatus translates one status; override is the descriptor's
// override as sent, if any.
func descriptorStatus(st *engine.Status, override *rlcommonv3.RateLimitDescriptor_RateLimitOverride) *rlsv3.RateLimitResponse_DescriptorStatus {
	switch {
	case st.Limit == nil:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	case st.Limit.Unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	ds := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OK,
		LimitRemaining:     uint32(min(max(st.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: durationpb.New(st.ResetAfter),
	}
	if st.Code != algorithms.Allowed && !st.Shadow {
		ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if st.Rule == nil && override != nil {
		ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
			RequestsPerUnit: override.GetRequestsPerUnit(),
			Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(override.GetUnit()),
		}
		if m := override.GetUnitMultiplier(); m != nil {
			ds.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(m.GetValue())
		}
	} else {
		ds.CurrentLimit = currentLimit(st.Limit)
	}
	return ds
}

var unitTo = map[config.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{
	config.UnitSecond: rlsv3.RateLimitResponse_RateLimit_SECOND,
	config.UnitMinute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	config.UnitHour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	config.UnitDay:    rlsv3.RateLimitResponse_RateLimit_DAY,
	config.UnitWeek:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	config.UnitMonth:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	config.UnitYear:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// longestFirst lists the units from the longest, for a period without one.
var longestFirst = []config.Unit{config.UnitYear, config.UnitMonth, config.UnitWeek,
	config.UnitDay, config.UnitHour, config.UnitMinute, config.UnitSecond}

// currentLimit translates a policy limit: its unit as written, or for a
// limit with only a period, the longest unit that divides the period (in
// whole seconds, rounded up, when none does).
func currentLimit(l *config.Limit) *rlsv3.RateLimitResponse_RateLimit {
	out := &rlsv3.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: uint32(l.Rate.Requests())}
	unit, mult := l.Unit, l.UnitMultiplier
	if _, ok := unitTo[unit]; !ok {
		p := l.Rate.Period()
		unit, mult = config.UnitSecond, int64((p+time.Second-1)/time.Second)
		for _, u := range longestFirst {
			if p%u.Duration() == 0 {
				unit, mult = u, int64(p/u.Duration())
				break
			}
		}
	}
	out.Unit = unitTo[unit]
	if mult > 1 {
		out.UnitMultiplier = wrapperspb.UInt32(uint32(min(mult, math.MaxUint32)))
	}
	return out
}
