package grpclimit

import (
	"context"
	"net"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratelimitd/ratelimitd/client"
)

// DescribeFunc names a call for the rate limiter from its full method name
// ("/pkg.Service/Method") and incoming metadata (nil when there is none):
// the descriptors to charge, all of them or none. Returning no descriptors
// lets the call through unchecked.
type DescribeFunc func(ctx context.Context, fullMethod string, md metadata.MD) []client.Descriptor

// UserFunc returns who made a call: the value of the "user" entry, or ""
// when it cannot tell.
type UserFunc func(ctx context.Context, md metadata.MD) string

// Tiers returns the descriptors of every tier, in order: a call goes
// through only when each has room, and is charged on all or none.
func Tiers(tiers ...DescribeFunc) DescribeFunc {
	return func(ctx context.Context, method string, md metadata.MD) []client.Descriptor {
		var ds []client.Descriptor
		for _, t := range tiers {
			ds = append(ds, t(ctx, method, md)...)
		}
		return ds
	}
}

// Global is one bucket for every call: [generic_key=global], the "global"
// rule of the default policy.
func Global() DescribeFunc {
	global := []client.Descriptor{client.NewDescriptor("generic_key", "global")}
	return func(context.Context, string, metadata.MD) []client.Descriptor { return global }
}

// PerMethod is a bucket per method: [path=fullMethod], the "per-endpoint"
// rule of the default policy.
func PerMethod() DescribeFunc {
	return func(_ context.Context, method string, _ metadata.MD) []client.Descriptor {
		return []client.Descriptor{client.NewDescriptor("path", method)}
	}
}

// PerUserPerMethod is a bucket per user and method: [path=fullMethod,
// user=user(...)], the "per-user-per-endpoint" rule of the default policy.
// When user returns "" the tier is left out (the other tiers still apply),
// rather than lumping every unknown caller into one bucket: end a FirstOf
// with PeerAddr to always have a user.
func PerUserPerMethod(user UserFunc) DescribeFunc {
	return func(ctx context.Context, method string, md metadata.MD) []client.Descriptor {
		u := user(ctx, md)
		if u == "" {
			return nil
		}
		return []client.Descriptor{client.NewDescriptor("path", method).With("user", u)}
	}
}

// Metadata names the user by the first value of a metadata key, such as
// "authorization" or "user-agent" (keys are lower case): "" when absent or
// empty. The value itself is never sent to the service, only
// client.SecretValue of it.
func Metadata(key string) UserFunc {
	return func(_ context.Context, md metadata.MD) string {
		vs := md.Get(key)
		if len(vs) == 0 || vs[0] == "" {
			return ""
		}
		return client.SecretValue(vs[0])
	}
}

// PeerAddr names the user by the address of the connection's peer, without
// the port; "" when the context has no peer. Behind a proxy that is the
// proxy's address.
func PeerAddr() UserFunc {
	return func(ctx context.Context, _ metadata.MD) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		addr := p.Addr.String()
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return addr
		}
		return host
	}
}

// FirstOf returns the first non-empty user of users, in order, or "".
func FirstOf(users ...UserFunc) UserFunc {
	return func(ctx context.Context, md metadata.MD) string {
		for _, u := range users {
			if v := u(ctx, md); v != "" {
				return v
			}
		}
		return ""
	}
}
