// Package authz decides which callers may ask ratelimitd what: an optional
// authorization policy maps a caller's identity — its verified mutual-TLS
// client certificate, or a bearer token — to the domains it may call and
// the verbs it may use there: check, charge, refund.
//
// Without a policy (no --authz-policy) there is no authorization: any
// caller that can reach the gRPC port (and, with --tls-client-ca, holds a
// certificate the CA signed) may check, charge and refund every domain,
// and so drain any tenant's buckets, or refill its own.
//
// The policy file's format, with a worked example, is in docs/authz.md. A
// policy that cannot be read or is invalid is rejected as a whole, with
// every problem as a config.FieldError; a problem in a token file names the
// file and line, never the token. The policy file and every token file are
// watched: a change to any of them reloads the whole policy.
//
// # Decision
//
// A caller's identity is its verified client certificate (the leaf of the
// chain the TLS handshake verified; a certificate that was not verified
// does not count) and the token of its "authorization: Bearer <token>"
// header or gRPC metadata. Authorize decides, in this order:
//
//  1. An authorization header that is not one "Bearer <token>", or a token
//     that no token file holds: Unauthenticated (ReasonBadToken). A wrong
//     token is never ignored in favour of the certificate or of anonymous.
//  2. The caller's clients are every client with a match rule its
//     certificate or token satisfies: the certificate's subject common
//     name (exactly), any of its DNS SANs (ignoring case), any of its URI
//     SANs (exactly, both written as net/url writes a parsed URI), the
//     token. No client, and the policy has anonymous: the
//     caller is anonymous. No client and no anonymous: Unauthenticated
//     (ReasonNoCredentials when it presented nothing, ReasonUnknownCaller
//     when its certificate matches no client).
//  3. Its grants are those of all its clients together, every grant adding
//     verbs in its domains. A call in a domain no grant names (nor "*"):
//     PermissionDenied (ReasonDomain). A call that needs a verb the grants
//     do not give there: PermissionDenied, ReasonPeekOnly for a charge,
//     ReasonRefund for a refund.
//
// The verbs (Access) are three. A grant of charge or refund gives check
// too; nothing else is implied — in particular charge does not give
// refund. A call needs (Ask):
//
//   - refund when any descriptor asks a refund, whatever its cost: in
//     ratelimit.v1 OPERATION_REFUND, in Envoy v3 is_negative_hits;
//   - charge when any descriptor that is neither a check nor a refund has a
//     cost above 0 (engine.Cost): every charge, whatever its overdraft
//     (ratelimit.v1 OVERDRAFT_NEVER, OVERDRAFT_ALWAYS or the policy's);
//     in Envoy v3 the request-level hits_addend is 0 in
//     what Envoy sends by default and means 1, so Envoy's ordinary calls
//     charge. A request without descriptors needs charge;
//   - check when it needs neither: every descriptor OPERATION_CHECK, or of
//     cost 0 (ratelimit.v1 hits 0; Envoy v3 a descriptor's hits_addend 0).
//
// A call that charges and refunds needs both. Refund is a verb of its own
// because a refund undoes a charge: a caller that may both charge and
// refund may charge without end (charge, refund, charge again), so the
// right to charge must not carry it. A policy written before refund was a
// verb (charge and peek only) loads unchanged and denies refunds: grant
// refund to the callers that give units back (Envoy's
// apply_on_stream_done with is_negative_hits, the Go client's Settle and
// Cancel). "peek" is still read as check.
//
// Denials are counted by reason (ratelimitd_authz_denied_total); no
// identity, client name or token is ever a label, a log field or part of an
// error other than the denial returned to the caller itself, which names
// its clients (the policy's names) and never its token.
//
// # Tokens
//
// Tokens are kept only as keyed digests (HMAC-SHA256 under a key drawn at
// random when the process starts) and looked up by digest, so no
// comparison touches a token's bytes and its timing says nothing about any
// token. Token values never appear in logs, metrics, errors or endpoints;
// Token's String, GoString and slog value are "[redacted]".
package authz
