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

// Ask returns what a rate limit request asks for: its domain, and Peek
// when it charges nothing (every descriptor a check, or of cost 0 by
// engine.Cost) or Charge. A refund or an overdraft charge of cost > 0 is a
// Charge: it changes what others may take. ok is false for a message that is no rate limit request. It
// knows ratelimit.v1's ShouldRateLimitRequest and Envoy v3's
// RateLimitRequest; an HTTP/JSON adapter that decodes into either, or into
// an engine.Request (AccessOf), asks the same question.
func Ask(req any) (domain string, access Access, ok bool) {
	switch r := req.(type) {
	case *ratelimitv1.ShouldRateLimitRequest:
		access = Peek
		for _, d := range r.GetDescriptors() {
			if d.GetOperation() == ratelimitv1.Operation_OPERATION_CHECK {
				continue
			}
			if engine.Cost(uint64(r.GetHits()), ownHits(d.Hits != nil, uint64(d.GetHits()))) > 0 {
				access = Charge
				break
			}
		}
		if len(r.GetDescriptors()) == 0 {
			access = Charge
		}
		return r.GetDomain(), access, true
	case *rlsv3.RateLimitRequest:
		access = Peek
		for _, d := range r.GetDescriptors() {
			h := d.GetHitsAddend()
			if engine.Cost(uint64(r.GetHitsAddend()), ownHits(h != nil, h.GetValue())) > 0 {
				access = Charge
				break
			}
		}
		if len(r.GetDescriptors()) == 0 {
			access = Charge
		}
		return r.GetDomain(), access, true
	}
	return "", 0, false
}

// AccessOf returns Peek when the engine request charges nothing (every
// descriptor a check, or of cost 0 by engine.Cost), else Charge; a request
// without descriptors is a Charge.
func AccessOf(r *engine.Request) Access {
	if len(r.Descriptors) == 0 {
		return Charge
	}
	for i := range r.Descriptors {
		if r.Descriptors[i].Op != engine.OpCheck && engine.Cost(r.Hits, r.Descriptors[i].Hits) > 0 {
			return Charge
		}
	}
	return Peek
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
