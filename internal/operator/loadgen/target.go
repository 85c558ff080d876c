package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// CheckLoopback returns nil when every address target's host resolves to
// is a loopback address (127.0.0.0/8, ::1), and an error naming the first
// one that is not, or the failure to resolve. target is HOST:PORT; HOST is
// an IP address or a name looked up with resolver (net.DefaultResolver when
// nil).
//
// A load tool can be pointed at the wrong machine by a typo; checking every
// address keeps a name that resolves to loopback and a remote address from
// slipping through.
func CheckLoopback(ctx context.Context, target string, resolver *net.Resolver) error {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("target %q: want HOST:PORT: %w", target, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.Unmap().IsLoopback() {
			return fmt.Errorf("target %s is not a loopback address; pass --allow-remote to load another machine", target)
		}
		return nil
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("target %s: %w", target, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("target %s: %s has no address", target, host)
	}
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return fmt.Errorf("target %s: %s resolves to %s, not a loopback address; pass --allow-remote to load another machine", target, host, a)
		}
	}
	return nil
}
