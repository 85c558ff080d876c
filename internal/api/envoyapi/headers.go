package envoyapi

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/internal/api/ratelimitheader"
	"github.com/ratelimitd/ratelimitd/internal/engine"
)

// Headers selects the rate limit headers a response asks Envoy to add to
// its reply to the client (response_headers_to_add). Every header but
// Retry-After describes one limit: the most restrictive of the request
// (engine.Response.MostRestrictive: an over-capacity limit, else the
// denial with the longest wait, else the limit with the fewest requests
// left; unlimited and shadow_mode rules never count). A request without
// such a limit gets none of them.
//
// Counts are of requests of cost 1. Seconds are whole seconds rounded up,
// so that a client that waits them never comes back early.
type Headers uint8

const (
	// HeadersOff adds no headers, as envoyproxy/ratelimit by default.
	HeadersOff Headers = iota
	// HeadersLegacy adds envoyproxy/ratelimit's headers with its default
	// names (LIMIT_RESPONSE_HEADERS_ENABLED), the triple of the early
	// drafts of "RateLimit header fields for HTTP":
	//
	//	RateLimit-Limit: 100       the limit's capacity: requests_per_unit, or a bucket's burst
	//	RateLimit-Remaining: 37    limit_remaining
	//	RateLimit-Reset: 25        duration_until_reset in seconds
	//
	// and Retry-After when the response is OVER_LIMIT.
	HeadersLegacy
	// HeadersDraft adds the fields of draft-ietf-httpapi-ratelimit-headers-11
	// (structured fields, RFC 9651):
	//
	//	RateLimit-Policy: "checkout";q=100;w=60
	//	RateLimit: "checkout";r=37;t=25
	//
	// The policy's name is the limit's name, else its rule's stat key
	// (domain.key_value...), else "default" (also when the name is not
	// printable ASCII). q is the capacity and w the seconds an empty
	// bucket or window takes to refill it: the window's length, or for a
	// bucket burst × period / requests. r is limit_remaining and t
	// duration_until_reset in seconds. Retry-After is added when the
	// response is OVER_LIMIT.
	HeadersDraft
)

var headerNames = [...]string{HeadersOff: "off", HeadersLegacy: "legacy", HeadersDraft: "draft"}

// String returns "off", "legacy" or "draft".
func (h Headers) String() string {
	if int(h) < len(headerNames) {
		return headerNames[h]
	}
	return "Headers(" + strconv.Itoa(int(h)) + ")"
}

// Set parses a flag value: "off" (or "false", "none"), "legacy" (or
// "true", which a bare --flag sets) or "draft". It makes *Headers a
// flag.Value.
func (h *Headers) Set(s string) error {
	switch strings.ToLower(s) {
	case "off", "false", "none":
		*h = HeadersOff
	case "legacy", "true":
		*h = HeadersLegacy
	case "draft":
		*h = HeadersDraft
	default:
		return fmt.Errorf("unknown headers %q (want off, legacy or draft)", s)
	}
	return nil
}

// IsBoolFlag lets a bare --flag mean "legacy".
func (h *Headers) IsBoolFlag() bool { return true }

// headers returns the headers for r, whose translation is out.
func (h Headers) headers(r *engine.Response, out *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	if h == HeadersOff {
		return nil
	}
	var hs []*corev3.HeaderValue
	add := func(k, v string) { hs = append(hs, &corev3.HeaderValue{Key: k, Value: v}) }
	if i := r.MostRestrictive(); i >= 0 {
		st := &r.Statuses[i]
		remaining := out.Statuses[i].GetLimitRemaining()
		capacity := st.Limit.Rate.Capacity()
		switch h {
		case HeadersLegacy:
			add(ratelimitheader.Limit, strconv.FormatInt(capacity, 10))
			add(ratelimitheader.Remaining, strconv.FormatUint(uint64(remaining), 10))
			add(ratelimitheader.Reset, strconv.FormatInt(ratelimitheader.Seconds(st.ResetAfter), 10))
		case HeadersDraft:
			name := policyName(st)
			refill := ratelimitheader.Refill(capacity, st.Limit.Rate.Requests(), st.Limit.Rate.Period())
			add(ratelimitheader.Policy, ratelimitheader.PolicyValue(name, capacity, refill))
			add(ratelimitheader.RateLimit, ratelimitheader.RateLimitValue(name, uint64(remaining), st.ResetAfter))
		}
	}
	if out.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && !r.Never {
		add(ratelimitheader.RetryAfter, strconv.FormatInt(ratelimitheader.Seconds(r.RetryAfter), 10))
	}
	return hs
}

// policyName returns the status's limit's name as a structured-field
// String: the limit's name, else its rule's stat key, else "default".
func policyName(st *engine.Status) string {
	name := st.Limit.Name
	if name == "" && st.Rule != nil {
		name = st.Rule.StatKey
	}
	return ratelimitheader.Name(name)
}
