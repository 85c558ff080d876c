// Package grpcstatus turns what deciding a request can fail with into the
// gRPC status its caller sees. Every adapter that answers over gRPC (and
// every adapter that maps gRPC codes onward, such as an HTTP one) uses it,
// so one failure gets one code whichever API the request came through.
package grpcstatus

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/engine"
)

// Of maps an error from engine.Engine.ShouldRateLimit, or from an adapter's
// translation of a request, to a gRPC status error:
//
//   - InvalidArgument, with the problem as the message, for a malformed
//     request (an *engine.InvalidError anywhere in err's chain);
//   - PermissionDenied, with the problem as the message, for a request the
//     policy refuses outright (an *engine.RefusedError: a refund of a rule
//     with refunds: false), as the authorization policy refuses a refund
//     its grants do not allow;
//   - the context's code (Canceled or DeadlineExceeded) when the call was
//     cancelled or ran out of time;
//   - Unavailable, "rate limit store: …", for anything else: the store
//     failed to decide.
//
// Of(nil) is nil.
func Of(err error) error {
	var (
		inv     *engine.InvalidError
		refused *engine.RefusedError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, inv.Error())
	case errors.As(err, &refused):
		return status.Error(codes.PermissionDenied, refused.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
	}
}
