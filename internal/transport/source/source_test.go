package source

import (
	"net"
	"net/netip"
	"testing"
)

func TestOf(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, c := range []struct {
		name string
		addr net.Addr
		want string
	}{
		{"IPv4: the address", tcp("192.0.2.7:5000"), "192.0.2.7/32"},
		{"IPv4 mapped in IPv6: the IPv4 address", tcp("[::ffff:192.0.2.7]:5000"), "192.0.2.7/32"},
		{"IPv6: its /64", tcp("[2001:db8:1:2:3:4:5:6]:5000"), "2001:db8:1:2::/64"},
		{"IPv6 with a zone: its /64, no zone", tcp("[fe80::1%eth0]:5000"), "fe80::/64"},
		{"not a TCPAddr, but host:port", &net.UDPAddr{IP: net.ParseIP("198.51.100.1"), Port: 1}, "198.51.100.1/32"},
		{"a Unix socket: the zero source", &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, "invalid Prefix"},
		{"nil: the zero source", nil, "invalid Prefix"},
	} {
		if got := Of(c.addr).String(); got != c.want {
			t.Errorf("%s: Of(%v) = %s, want %s", c.name, c.addr, got, c.want)
		}
	}
	if Of(tcp("[2001:db8::1]:1")) != Of(tcp("[2001:db8::ffff]:2")) {
		t.Error("two addresses of one /64 are different sources")
	}
	if Of(tcp("192.0.2.1:1")) == Of(tcp("192.0.2.2:1")) {
		t.Error("two IPv4 addresses are one source")
	}
}
