package authz

import (
	"context"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/engine"
)

// Ask returns what a rate limit request asks for: its domain, and the
// verbs it needs there (Authorize): Charge when a descriptor that is
// neither a check nor a refund has a cost above 0 (engine.Cost), Refund
// when a descriptor asks a refund (whatever its cost), Check when it does
// neither (every descriptor a check, or of cost 0). A request without
// descriptors needs Charge. ok is false for a message that is no rate
// limit request. It knows ratelimit.v1's ShouldRateLimitRequest (a
// refund is OPERATION_REFUND, a check OPERATION_CHECK) and Envoy v3's
// RateLimitRequest (a refund is is_negative_hits, a check a descriptor's
// hits_addend of 0); the HTTP/JSON APIs decode into these very messages,
// and an adapter that decodes into an engine.Request asks AccessOf the
// same question.
func Ask(req any) (domain string, access Access, ok bool) {
	switch r := req.(type) {
	case *ratelimitv1.ShouldRateLimitRequest:
		for _, d := range r.GetDescriptors() {
			op := d.GetOperation()
			access |= need(op == ratelimitv1.Operation_OPERATION_CHECK, op == ratelimitv1.Operation_OPERATION_REFUND,
				engine.Cost(uint64(r.GetHits()), ownHits(d.Hits != nil, uint64(d.GetHits()))))
		}
		return r.GetDomain(), needs(access, len(r.GetDescriptors())), true
	case *rlsv3.RateLimitRequest:
		for _, d := range r.GetDescriptors() {
			h := d.GetHitsAddend()
			cost := engine.Cost(uint64(r.GetHitsAddend()), ownHits(h != nil, h.GetValue()))
			access |= need(h != nil && cost == 0, d.GetIsNegativeHits(), cost)
		}
		return r.GetDomain(), needs(access, len(r.GetDescriptors())), true
	}
	return "", 0, false
}

// AccessOf returns the verbs the engine request needs, as Ask says.
func AccessOf(r *engine.Request) Access {
	var access Access
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		access |= need(d.Op == engine.OpCheck, d.Op == engine.OpRefund, engine.Cost(r.Hits, d.Hits))
	}
	return needs(access, len(r.Descriptors))
}

// need returns the verb one descriptor needs: Refund for a refund, else
// Charge for a cost above 0 that is not a check, else nothing (a check).
func need(check, refund bool, cost int64) Access {
	switch {
	case refund:
		return Refund
	case !check && cost > 0:
		return Charge
	}
	return 0
}

// needs returns what a request of n descriptors whose descriptors need
// access needs: Charge without descriptors, Check when they need nothing.
func needs(access Access, n int) Access {
	switch {
	case n == 0:
		return Charge
	case access == 0:
		return Check
	}
	return access
}

func ownHits(set bool, v uint64) *uint64 {
	if !set {
		return nil
	}
	return &v
}

// healthPrefix is the gRPC health service's methods. Its unary ones
// (Check, List) stay open to everyone: load balancers and probes call them
// without credentials.
const healthPrefix = "/grpc.health.v1.Health/"

// healthWatch is the health service's Watch: a stream that lasts as long
// as its caller wants, for callers the policy identifies. Those are the
// clients that watch health: grpc-go's client-side health checking, with
// the credentials of their calls.
const healthWatch = healthPrefix + "Watch"

// reflectionPrefix is gRPC reflection's services (v1 and v1alpha), whose
// streams stay open: they reveal no bucket and charge nothing.
const reflectionPrefix = "/grpc.reflection."

// Tap is a tap.ServerInHandle (grpc.InTapHandle) that refuses, on its
// headers alone and before its message is read, a call whose caller no
// grant can allow: a malformed authorization header or an unknown token, or
// a caller that matches no client where the policy has no anonymous grants
// (Unauthenticated, counted by reason as Authorize counts). The health
// service's Check (and List) and reflection stay open, as they are to the
// interceptor; the health service's Watch is refused to a caller no
// grant can allow, as a rate limit call is. The interceptor still decides
// each call that passes, by its domain and access; the tap only spares
// the server the message of a caller that would be refused anyway.
func (a *Authorizer) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if m := info.FullMethodName; (strings.HasPrefix(m, healthPrefix) && m != healthWatch) || strings.HasPrefix(m, reflectionPrefix) {
		return ctx, nil
	}
	if e := a.policy.Load().identify(FromGRPC(ctx)); e != nil {
		return ctx, a.refuse(e)
	}
	return ctx, nil
}

// UnaryServerInterceptor authorizes every unary call before its handler
// runs: a rate limit request (Ask) is decided by Authorize, with the
// caller's identity from FromGRPC, and refused with the refusal's code
// (Unauthenticated or PermissionDenied) and message; the health service's
// Check stays open; any other unary method is refused (PermissionDenied,
// ReasonMethod), so that a service added later is closed until a rule
// covers it. Streams (health Watch, reflection) are not unary and not
// intercepted: they reveal no bucket and charge nothing (Tap keeps the
// Watch to callers the policy identifies).
func (a *Authorizer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, healthPrefix) {
			return handler(ctx, req)
		}
		domain, access, ok := Ask(req)
		if !ok {
			return nil, a.refuse(refuse(ReasonMethod, "no rule for method %s", info.FullMethod))
		}
		if err := a.Authorize(FromGRPC(ctx), domain, access); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}
