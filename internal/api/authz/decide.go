package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Identity is what a caller proved about itself.
type Identity struct {
	// Certificate is the leaf of the client certificate chain that the TLS
	// handshake verified; nil when the caller presented none, or presented
	// one that was not verified.
	Certificate *x509.Certificate
	// Token is the bearer token the caller presented (zero: none).
	Token Token
	// malformed says what is wrong with the caller's authorization header
	// (never quoting it); empty when it is absent or well-formed.
	malformed string
}

// VerifiedCertificate returns the leaf of the first chain the handshake
// verified, or nil: a certificate the server did not verify identifies no
// one.
func VerifiedCertificate(state *tls.ConnectionState) *x509.Certificate {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil
	}
	return state.VerifiedChains[0][0]
}

// WithAuthorization returns id with the token of the authorization header
// values (HTTP's Authorization header, gRPC's "authorization" metadata): no
// value is no token; one value must be "Bearer <token>" (the scheme in any
// case, one or more spaces); anything else — another scheme, several
// values — makes the identity malformed, which Authorize refuses.
func (id Identity) WithAuthorization(values []string) Identity {
	switch len(values) {
	case 0:
		return id
	case 1:
	default:
		id.malformed = "more than one authorization header"
		return id
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	token = strings.TrimLeft(token, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		id.malformed = `the authorization header is not "Bearer <token>"`
		return id
	}
	id.Token = BearerToken(token)
	return id
}

// FromGRPC returns the identity of a gRPC call's caller: the verified
// client certificate of its TLS connection and its "authorization"
// metadata.
func FromGRPC(ctx context.Context) Identity {
	var id Identity
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			id.Certificate = VerifiedCertificate(&info.State)
		}
	}
	return id.WithAuthorization(metadata.ValueFromIncomingContext(ctx, "authorization"))
}

// FromHTTP returns the identity of an HTTP request's caller: the verified
// client certificate of its TLS connection and its Authorization header.
func FromHTTP(r *http.Request) Identity {
	id := Identity{Certificate: VerifiedCertificate(r.TLS)}
	return id.WithAuthorization(r.Header.Values("Authorization"))
}

// Reason is why a call was refused; its String is the metric label.
type Reason uint8

const (
	// ReasonBadToken: a malformed authorization header, or a bearer token
	// no token file holds (Unauthenticated).
	ReasonBadToken Reason = iota + 1
	// ReasonNoCredentials: no certificate and no token, and no anonymous
	// grants (Unauthenticated).
	ReasonNoCredentials
	// ReasonUnknownCaller: a certificate that matches no client, and no
	// anonymous grants (Unauthenticated).
	ReasonUnknownCaller
	// ReasonDomain: no grant names the domain (PermissionDenied).
	ReasonDomain
	// ReasonPeekOnly: a charge where the grants do not allow charges
	// (PermissionDenied). Its label is peek_only, check's former name.
	ReasonPeekOnly
	// ReasonMethod: a call of a method the interceptor has no rule for
	// (PermissionDenied).
	ReasonMethod
	// ReasonRefund: a refund where the grants do not allow refunds
	// (PermissionDenied).
	ReasonRefund
)

// Reasons lists every Reason, for metrics.
var Reasons = []Reason{ReasonBadToken, ReasonNoCredentials, ReasonUnknownCaller, ReasonDomain, ReasonPeekOnly, ReasonMethod, ReasonRefund}

// String returns the reason's metric label.
func (r Reason) String() string {
	switch r {
	case ReasonBadToken:
		return "bad_token"
	case ReasonNoCredentials:
		return "no_credentials"
	case ReasonUnknownCaller:
		return "unknown_caller"
	case ReasonDomain:
		return "domain"
	case ReasonPeekOnly:
		return "peek_only"
	case ReasonMethod:
		return "method"
	case ReasonRefund:
		return "refund"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Code returns the gRPC code of a refusal for r: Unauthenticated when the
// caller is not known, PermissionDenied when it is known but not allowed.
func (r Reason) Code() codes.Code {
	switch r {
	case ReasonBadToken, ReasonNoCredentials, ReasonUnknownCaller:
		return codes.Unauthenticated
	}
	return codes.PermissionDenied
}

// HTTPStatus returns the HTTP status of a refusal for r: 401 for
// Unauthenticated (an HTTP adapter adds "WWW-Authenticate: Bearer"), 403
// for PermissionDenied.
func (r Reason) HTTPStatus() int {
	if r.Code() == codes.Unauthenticated {
		return http.StatusUnauthorized
	}
	return http.StatusForbidden
}

// Error is a refusal: its Reason, and a message for the caller that names
// what was refused (the domain, the access, the caller's clients as the
// policy names them), never a token.
type Error struct {
	Reason Reason
	msg    string
}

func (e *Error) Error() string { return e.msg }

// GRPCStatus makes status.FromError and status.Code see the refusal's code
// (Reason.Code) and message.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Reason.Code(), e.msg) }

func refuse(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, msg: "authorization: " + fmt.Sprintf(format, args...)}
}

// Authorize decides whether the caller id may make a call that needs
// access (Check, or Charge, Refund or both: see Ask) in domain, as the
// package documentation says: nil when it may, else an *Error. It
// allocates nothing when it allows the call.
func (p *Policy) Authorize(id Identity, domain string, access Access) error {
	if e := p.decide(id, domain, access); e != nil {
		return e
	}
	return nil
}

func (p *Policy) decide(id Identity, domain string, want Access) *Error {
	byToken, e := p.tokenClients(id)
	if e != nil {
		return e
	}
	matched, has := false, Access(0)
	p.clientsOf(id, byToken, func(c *client) {
		matched = true
		has |= c.access(domain)
	})
	if !matched {
		if e := p.anonymousOnly(id); e != nil {
			return e
		}
		has = p.anonymous.access(domain)
	}
	if has&want == want {
		return nil
	}
	who := p.who(id, byToken, matched)
	switch {
	case has == 0:
		return refuse(ReasonDomain, "%s may not call domain %s", who, quote(domain))
	case want&Charge != 0 && has&Charge == 0:
		return refuse(ReasonPeekOnly, "%s may not charge in domain %s (granted: %v); this call charges (a descriptor's hits above 0)", who, quote(domain), has)
	}
	return refuse(ReasonRefund, "%s may not refund in domain %s (granted: %v); this call refunds (OPERATION_REFUND, is_negative_hits)", who, quote(domain), has)
}

// identify refuses a caller that no call can be allowed to: steps 1 and 2
// of the decision (Unauthenticated). It reads no request, so it can run on
// a call's headers alone, before its message is read.
func (p *Policy) identify(id Identity) *Error {
	byToken, e := p.tokenClients(id)
	if e != nil {
		return e
	}
	matched := false
	p.clientsOf(id, byToken, func(*client) { matched = true })
	if !matched {
		return p.anonymousOnly(id)
	}
	return nil
}

// tokenClients returns the clients of id's token (none without a token),
// or the refusal of a malformed header or an unknown token.
func (p *Policy) tokenClients(id Identity) ([]*client, *Error) {
	if id.malformed != "" {
		return nil, refuse(ReasonBadToken, "%s", id.malformed)
	}
	if id.Token.IsZero() {
		return nil, nil
	}
	cs, ok := p.byToken[digestOf(id.Token.value)]
	if !ok {
		return nil, refuse(ReasonBadToken, "the bearer token is not valid")
	}
	return cs, nil
}

// anonymousOnly returns the refusal of a caller that matches no client:
// nil when the policy has anonymous grants.
func (p *Policy) anonymousOnly(id Identity) *Error {
	switch {
	case p.anonymous != nil:
		return nil
	case id.Certificate == nil:
		return refuse(ReasonNoCredentials, "no client certificate or bearer token (this server authorizes its callers)")
	}
	return refuse(ReasonUnknownCaller, "the client certificate matches no client of the authorization policy")
}

// clientsOf calls f for every client whose match rules id satisfies (a
// client more than once if several rules match), byToken being the
// clients of its token.
func (p *Policy) clientsOf(id Identity, byToken []*client, f func(*client)) {
	for _, c := range byToken {
		f(c)
	}
	cert := id.Certificate
	if cert == nil {
		return
	}
	if cert.Subject.CommonName != "" {
		for _, c := range p.byCN[cert.Subject.CommonName] {
			f(c)
		}
	}
	if len(p.byDNS) > 0 {
		for _, n := range cert.DNSNames {
			for _, c := range p.byDNS[strings.ToLower(n)] {
				f(c)
			}
		}
	}
	if len(p.byURI) > 0 {
		for _, u := range cert.URIs {
			for _, c := range p.byURI[u.String()] {
				f(c)
			}
		}
	}
}

// who names the caller in a refusal: its clients, or anonymous.
func (p *Policy) who(id Identity, byToken []*client, matched bool) string {
	if !matched {
		return "anonymous callers"
	}
	var names []string
	p.clientsOf(id, byToken, func(c *client) {
		for _, n := range names {
			if n == c.name {
				return
			}
		}
		names = append(names, c.name)
	})
	if len(names) == 1 {
		return "client " + strconv.Quote(names[0])
	}
	for i, n := range names {
		names[i] = strconv.Quote(n)
	}
	return "clients " + strings.Join(names, ", ")
}

// quote quotes a request-supplied domain for a message, cut to 128 bytes.
func quote(s string) string {
	const max = 128
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}
