// Package hostcheck keeps web pages away from an HTTP server that only
// programs and its operators should reach.
//
// A page on another site can make a browser send requests to any address
// the browser reaches — loopback, a private network — and, through DNS
// rebinding (a name of the attacker's that resolves to the server's
// address), read the answers as if it were the server's own page. Handler
// refuses both:
//
//   - a request whose Host is not one the server answers to: 421
//     Misdirected Request. Allowed are every IP address (a rebound name is
//     never one; probes and scrapers by pod IP are), "localhost" and names
//     under ".localhost", and the names given to New, compared without
//     case and without a trailing dot; "*" allows any Host.
//   - a cross-origin request that is not GET, HEAD or OPTIONS, as a
//     browser marks it (Sec-Fetch-Site, or an Origin other than the Host):
//     403, by net/http's CrossOriginProtection. Programs that send neither
//     header (curl, gRPC gateways, client libraries) are not affected.
package hostcheck

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Hosts is the set of Host names a server answers to.
type Hosts struct {
	any   bool
	names map[string]bool
}

// New returns the Hosts of names (host names, without a port; "*" for
// any) besides IP addresses and localhost.
func New(names ...string) *Hosts {
	h := &Hosts{names: map[string]bool{}}
	for _, n := range names {
		if n == "*" {
			h.any = true
		}
		h.names[normalize(n)] = true
	}
	return h
}

func normalize(host string) string { return strings.TrimSuffix(strings.ToLower(host), ".") }

// Allows reports whether a request with Host header host (a port or not)
// is for this server.
func (h *Hosts) Allows(host string) bool {
	if h.any {
		return true
	}
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = normalize(host)
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || h.names[host]
}

// Handler serves next the requests h allows that are not unsafe
// cross-origin ones.
func (h *Hosts) Handler(next http.Handler) http.Handler {
	next = http.NewCrossOriginProtection().Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Allows(r.Host) {
			http.Error(w, "this server does not answer for host "+quote(r.Host)+" (--allowed-hosts)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// quote quotes a request-supplied host for a message, cut to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return `"` + strings.ToValidUTF8(strings.Map(func(r rune) rune {
		if r < ' ' || r == '"' {
			return '?'
		}
		return r
	}, s), "?") + `"`
}
