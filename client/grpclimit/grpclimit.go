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
//
// NewConcurrency's Interceptor limits calls in flight instead (a policy's
// algorithm: concurrency): each call holds units while its handler runs,
// released when it returns, panics and cancellations included.
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
	inFlight bool          // NewConcurrency's: Acquire and Release instead of Charge
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

// NewConcurrency returns an Interceptor that holds units in flight with c
// in domain for each call, named by describe, while its handler runs: a
// unary call until its handler returns, a stream until it ends.
// client.Client.Acquire comes before the handler, Lease.Release once it
// has returned — normally, by a panic, or after the call's context ended
// (the caller cancelled, or its deadline passed). Name only descriptors of
// concurrency rules (algorithm: concurrency); to limit calls by rate too,
// chain an Interceptor made by New in front of this one:
//
//	rate := grpclimit.New(c, "default", grpclimit.PerMethod())
//	inFlight := grpclimit.NewConcurrency(c, "default", perTenant)
//	s := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(rate.Unary(), inFlight.Unary()),
//		grpc.ChainStreamInterceptor(rate.Stream(), inFlight.Stream()))
//
// A caller sees what New's Interceptor shows (see the package
// documentation): a denied call ends with ResourceExhausted, the rule
// named, and RetryInfo with the service's wait, which is until the oldest
// unit in flight frees itself at its lease's end (a release may free one
// sooner); the failure policy decides when the service cannot, and a call
// it admits holds no unit.
//
// The release is sent after the handler returns and before the call's
// status goes out, on a context detached from the call's (it is sent even
// when the call's context has ended), within the client's timeout
// (client.WithTimeout). A release that cannot reach the service does not
// change the call's answer; the client reports it
// (client.WithReleaseFailureHook, and its log), and the unit frees itself
// at its lease's end. A handler's panic goes on once the release is sent
// (grpc-go does not recover panics: a recovery interceptor chained in
// front of this one does). WithQuota does not apply here.
func NewConcurrency(c *client.Client, domain string, describe DescribeFunc, opts ...Option) *Interceptor {
	i := New(c, domain, describe, opts...)
	i.quota, i.inFlight = nil, true
	return i
}

// Unary returns the interceptor for unary calls.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := i.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// Stream returns the interceptor for streaming calls: one check per
// stream, and for NewConcurrency's a unit held until the stream ends.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := i.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// admit returns, when the call may proceed (once its queue delay has
// passed), what to call when its handler has returned; otherwise the
// status error to end it with.
func (i *Interceptor) admit(ctx context.Context, method string) (release func(), err error) {
	release = func() {}
	md, _ := metadata.FromIncomingContext(ctx)
	ds := i.describe(ctx, method, md)
	if len(ds) == 0 {
		return release, nil
	}
	if i.quota != nil {
		if ok, n := i.quota.Admit(ctx, ds...); !ok {
			return nil, status.Error(codes.ResourceExhausted, "throttled by quota: "+ds[n].String())
		}
		return release, nil
	}
	var d client.Decision
	if i.inFlight {
		var l *client.Lease
		if l, err = i.client.Acquire(ctx, i.domain, ds...); err == nil {
			d = l.Decision
			// Its error went to the client's hook and log; the unit is
			// left to its lease.
			release = func() { l.Release(context.WithoutCancel(ctx)) }
		}
	} else {
		d, err = i.client.Charge(ctx, i.domain, ds...)
	}
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	switch {
	case d.Allowed:
		if d.Delay > 0 {
			select {
			case <-i.client.Clock().After(d.Delay):
			case <-ctx.Done():
				release()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		return release, nil
	case d.Source == client.SourceFailClosed:
		return nil, withRetry(codes.Unavailable, d)
	case d.Never:
		return nil, status.Error(codes.ResourceExhausted, d.String())
	}
	return nil, withRetry(codes.ResourceExhausted, d)
}

// withRetry is a status error with a RetryInfo detail of d's RetryAfter.
func withRetry(code codes.Code, d client.Decision) error {
	st, err := status.New(code, d.String()).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	if err != nil { // a RetryInfo always marshals; keep the code regardless
		return status.Error(code, d.String())
	}
	return st.Err()
}
