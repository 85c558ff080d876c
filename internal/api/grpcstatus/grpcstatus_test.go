package grpcstatus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/api/grpcstatus"
	"github.com/ratelimitd/ratelimitd/internal/engine"
)

func TestOf(t *testing.T) {
	invalid := &engine.InvalidError{Field: "domain", Problem: "must not be empty"}
	refused := &engine.RefusedError{Field: "descriptors[0]", Problem: "asks a refund of rule d.k, which takes no refunds"}
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"invalid request", invalid, codes.InvalidArgument, invalid.Error()},
		{"invalid request, wrapped", fmt.Errorf("translating: %w", invalid), codes.InvalidArgument, invalid.Error()},
		{"a refund the policy refuses", refused, codes.PermissionDenied, refused.Error()},
		{"cancelled", context.Canceled, codes.Canceled, context.Canceled.Error()},
		{"timed out, wrapped", fmt.Errorf("redis: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "redis: context deadline exceeded"},
		{"store failure", errors.New("connection refused"), codes.Unavailable, "rate limit store: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := status.FromError(grpcstatus.Of(tc.err))
			if !ok || s.Code() != tc.code || s.Message() != tc.msg {
				t.Errorf("Of(%v) = %v %q; want %v %q", tc.err, s.Code(), s.Message(), tc.code, tc.msg)
			}
		})
	}
	if err := grpcstatus.Of(nil); err != nil {
		t.Errorf("Of(nil) = %v; want nil", err)
	}
}
