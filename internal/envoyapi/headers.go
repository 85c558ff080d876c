package envoyapi

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/internal/config"
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

// Header names.
const (
	headerLimit      = "RateLimit-Limit"
	headerRemaining  = "RateLimit-Remaining"
	headerReset      = "RateLimit-Reset"
	headerPolicy     = "RateLimit-Policy"
	headerRateLimit  = "RateLimit"
	headerRetryAfter = "Retry-After"
)

// headers returns the headers for r, whose translation is out.
func (h Headers) headers(r *engine.Response, out *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	if h == HeadersOff {
		return nil
	}
	var hs []*corev3.HeaderValue
	add := func(k, v string) { hs = append(hs, &corev3.HeaderValue{Key: k, Value: v}) }
	if i := r.MostRestrictive(); i >= 0 {
		st := &r.Statuses[i]
		remaining := strconv.FormatUint(uint64(out.Statuses[i].GetLimitRemaining()), 10)
		reset := strconv.FormatInt(seconds(st.ResetAfter), 10)
		capacity := strconv.FormatInt(st.Limit.Rate.Capacity(), 10)
		switch h {
		case HeadersLegacy:
			add(headerLimit, capacity)
			add(headerRemaining, remaining)
			add(headerReset, reset)
		case HeadersDraft:
			name := policyName(st)
			policy := name + ";q=" + capacity
			if w := refill(st.Limit); w > 0 {
				policy += ";w=" + strconv.FormatInt(seconds(w), 10)
			}
			add(headerPolicy, policy)
			add(headerRateLimit, name+";r="+remaining+";t="+reset)
		}
	}
	if out.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && !r.Never {
		add(headerRetryAfter, strconv.FormatInt(seconds(r.RetryAfter), 10))
	}
	return hs
}

// seconds returns d in whole seconds, rounded up; 0 for d <= 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// refill returns how long an empty bucket or window of l takes to fill:
// Capacity × Period / Requests, rounded up; 0 for a limit without a rate
// (requests_per_unit: 0). At most algorithms.MaxSpan, as NewLimit checks.
func refill(l *config.Limit) time.Duration {
	requests := l.Rate.Requests()
	if requests <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(l.Rate.Capacity()), uint64(l.Rate.Period()))
	q, rem := bits.Div64(hi, lo, uint64(requests))
	if rem != 0 {
		q++
	}
	return time.Duration(min(q, math.MaxInt64))
}

// policyName returns the status's limit's name as a structured-field
// String: the limit's name, else its rule's stat key, else "default".
func policyName(st *engine.Status) string {
	name := st.Limit.Name
	if name == "" && st.Rule != nil {
		name = st.Rule.StatKey
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c > 0x7e {
			return `"default"`
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	if name == "" {
		return `"default"`
	}
	b.WriteByte('"')
	return b.String()
}
