// Package source tells callers apart by the address they connect from,
// the one thing a server knows of a caller before the caller says who it
// is.
//
// A source is an IPv4 address, or the /64 prefix of an IPv6 address: a
// host is commonly given a whole /64 and may connect from any address in
// it, so those addresses are one source. Callers behind one NAT or proxy
// are one source. An address that is not IP (a Unix socket, say) is the
// zero Prefix: every such caller is the same source.
package source

import (
	"net"
	"net/netip"
)

// Of returns the source of a connection whose remote address is a.
func Of(a net.Addr) netip.Prefix {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case nil:
		return netip.Prefix{}
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Prefix{}
		}
		ip = ap.Addr()
	}
	if !ip.IsValid() {
		return netip.Prefix{}
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}
