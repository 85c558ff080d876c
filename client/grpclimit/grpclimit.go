// Package grpclimit holds gRPC server interceptors that ask ratelimitd
// about each call before its handler runs.
//
//	c, _ := client.New("127.0.0.1:8081")
//	limit := grpclimit.New(c, "default", grpclimit.Tiers(
//		grpclimit.Global(),    // [generic_key=global]
//		grpclimit.PerMethod(), // [path=/pkg.Service/Method]
//		grpclimit.PerUserPerMethod(grpclimit.FirstOf(grpclimit.Metadata("authorization"), grpclimit.PeerAddr())),
//	))
//	s := grpc.NewServer(grpc.UnaryInterceptor(limit.Unary()), grpc.StreamInterceptor(limit.Stream()))
//
// What a caller sees:
//
//   - Admitted: the handler's answer. A call admitted into a
//     leaky_bucket_queue waits its delay first; if its context ends while
//     waiting, the handler does not run and the call ends with the
//     context's code (Canceled or DeadlineExceeded).
//   - Denied: codes.ResourceExhausted, the handler not run, with the message
//     "throttled by policy 'per-user-per-endpoint'; retry after 120 ms" and
//     a google.rpc.RetryInfo detail whose retry_delay is the exact wait, so
//     any gRPC client can read it. A call that costs more than a limit's
//     capacity gets no RetryInfo: no wait would admit it.
//   - The service cannot decide: the client's failure policy. Fail open
//     (the default): the handler runs. Fail closed: codes.Unavailable with
//     RetryInfo carrying the fail-closed wait.
//
// A stream is checked once, when it opens, not per message.
package grpclimit

import (
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/quota"
)

// Interceptor limits the calls of a gRPC server. Make one with New; it is
// safe for concurrent use.
type Interceptor struct {
	client   *client.Client
	domain   string
	describe DescribeFunc
	quota    *quota.Client // WithQuota
}

// An Option configures an Interceptor.
type Option func(*Interceptor)

// WithQuota decides each call locally against quota assignments
// (quota.Client.Admit: each descriptor a bucket of q's domain) instead of
// asking the service per call; a denied call ends with ResourceExhausted,
// "throttled by quota: <descriptor>", without RetryInfo.
func WithQuota(q *quota.Client) Option { return func(i *Interceptor) { i.quota = q } }

// New returns an Interceptor that checks each call with c in domain, named
// by describe. A call for which describe returns no descriptors goes
// through without a check.
func New(c *client.Client, domain string, describe DescribeFunc, opts ...Option) *Interceptor {
	i := &Interceptor{client: c, domain: domain, describe: describe}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Unary returns the interceptor for unary calls.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := i.admit(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the interceptor for streaming calls: one check per stream.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := i.admit(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// admit returns nil when the call may proceed, once its queue delay has
// passed, and otherwise the status error to end it with.
func (i *Interceptor) admit(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	ds := i.describe(ctx, method, md)
	if len(ds) == 0 {
		return nil
	}
	if i.quota != nil {
		if ok, n := i.quota.Admit(ctx, ds...); !ok {
			return status.Error(codes.ResourceExhausted, "throttled by quota: "+ds[n].String())
		}
		return nil
	}
	d, err := i.client.Charge(ctx, i.domain, ds...)
	if err != nil {
		return status.FromContextError(err).Err()
	}
	switch {
	case d.Allowed:
		if d.Delay > 0 {
			select {
			case <-i.client.Clock().After(d.Delay):
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		return nil
	case d.Source == client.SourceFailClosed:
		return withRetry(codes.Unavailable, d)
	case d.Never:
		return status.Error(codes.ResourceExhausted, d.String())
	}
	return withRetry(codes.ResourceExhausted, d)
}

// withRetry is a status error with a RetryInfo detail of d's RetryAfter.
func withRetry(code codes.Code, d client.Decision) error {
	st, err := status.New(code, d.String()).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	if err != nil { // a RetryInfo always marshals; keep the code regardless
		return status.Error(code, d.String())
	}
	return st.Err()
}
