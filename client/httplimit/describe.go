package httplimit

import (
	"net"
	"net/http"

	"github.com/ratelimitd/ratelimitd/client"
)

// DescribeFunc names a request for the rate limiter: the descriptors to
// charge, all of them or none. It runs on every request, before the
// handler; returning no descriptors lets the request through unasked.
type DescribeFunc func(r *http.Request) []client.Descriptor

// RouteFunc returns the route of a request: the value of the "path" entry.
type RouteFunc func(r *http.Request) string

// UserFunc returns who sent a request: the value of the "user" entry, or
// "" when it cannot tell.
type UserFunc func(r *http.Request) string

// Tiers returns the descriptors of every tier, in order: a request goes
// through only when each has room, and is charged on all or none.
func Tiers(tiers ...DescribeFunc) DescribeFunc {
	return func(r *http.Request) []client.Descriptor {
		var ds []client.Descriptor
		for _, t := range tiers {
			ds = append(ds, t(r)...)
		}
		return ds
	}
}

// Global is one bucket for every request: [generic_key=global], the
// "global" rule of the default policy.
func Global() DescribeFunc {
	global := []client.Descriptor{client.NewDescriptor("generic_key", "global")}
	return func(*http.Request) []client.Descriptor { return global }
}

// PerRoute is a bucket per route: [path=route(r)], the "per-endpoint" rule
// of the default policy.
func PerRoute(route RouteFunc) DescribeFunc {
	return func(r *http.Request) []client.Descriptor {
		return []client.Descriptor{client.NewDescriptor("path", route(r))}
	}
}

// PerUserPerRoute is a bucket per user and route: [path=route(r),
// user=user(r)], the "per-user-per-endpoint" rule of the default policy.
// When user(r) is "" the tier is left out of the request (the other tiers
// still apply), rather than lumping every unknown sender into one bucket:
// end a FirstOf with ClientAddr to always have a user.
func PerUserPerRoute(route RouteFunc, user UserFunc) DescribeFunc {
	return func(r *http.Request) []client.Descriptor {
		u := user(r)
		if u == "" {
			return nil
		}
		return []client.Descriptor{client.NewDescriptor("path", route(r)).With("user", u)}
	}
}

// Path routes by the URL's path, as sent. Every distinct path is a route of
// its own, so a client varying the path (/orders/1, /orders/2, ...) gets a
// fresh bucket each time: prefer Pattern.
func Path() RouteFunc {
	return func(r *http.Request) string { return r.URL.Path }
}

// Pattern routes by the ServeMux pattern that serves the request ("GET
// /orders/{id}"): the request's own Pattern when a mux has already routed
// it, else the one mux would choose, so the middleware may wrap mux itself.
// Requests no pattern matches (mux's 404s) share the route "".
func Pattern(mux *http.ServeMux) RouteFunc {
	return func(r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern
		}
		_, pattern := mux.Handler(r)
		return pattern
	}
}

// Header names the user by a request header, such as Authorization or
// User-Agent: "" when the header is absent or empty. The value itself is
// never sent to the service, only client.SecretValue of it.
func Header(name string) UserFunc {
	return func(r *http.Request) string {
		v := r.Header.Get(name)
		if v == "" {
			return ""
		}
		return client.SecretValue(v)
	}
}

// ClientAddr names the user by the address of the connection's peer
// (Request.RemoteAddr, without the port). Behind a proxy that is the
// proxy's address: write a UserFunc that reads the header your proxy sets,
// trusting it only from the proxy.
func ClientAddr() UserFunc {
	return func(r *http.Request) string {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return r.RemoteAddr
		}
		return host
	}
}

// FirstOf returns the first non-empty user of users, in order, or "".
func FirstOf(users ...UserFunc) UserFunc {
	return func(r *http.Request) string {
		for _, u := range users {
			if v := u(r); v != "" {
				return v
			}
		}
		return ""
	}
}
