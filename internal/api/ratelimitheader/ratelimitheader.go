// Package ratelimitheader writes the HTTP header fields that tell a client
// about its rate limit: the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11 (structured fields, RFC 9651),
// the legacy RateLimit-Limit/-Remaining/-Reset triple, and Retry-After
// (RFC 9110). The daemon's Envoy adapter and the client's HTTP middleware
// both write them, so a client sees the same fields behind either.
//
// Every count is of requests of cost 1; every time is whole seconds rounded
// up, so that a client that waits them never comes back early. A bucket in
// debt (an overdraft charge took more than was left) shows 0 remaining and
// a reset that includes the debt: the time until it is back at rest.
package ratelimitheader

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Field names.
const (
	Policy     = "RateLimit-Policy"
	RateLimit  = "RateLimit"
	Limit      = "RateLimit-Limit"
	Remaining  = "RateLimit-Remaining"
	Reset      = "RateLimit-Reset"
	RetryAfter = "Retry-After"
)

// Seconds returns d in whole seconds, rounded up; 0 for d <= 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// Refill returns how long an empty bucket or window takes to fill to its
// capacity at requests per period: capacity × period / requests, rounded up
// to the nanosecond and saturating at the longest Duration; 0 when requests
// or period is not positive.
func Refill(capacity, requests int64, period time.Duration) time.Duration {
	if requests <= 0 || period <= 0 || capacity <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(capacity), uint64(period))
	if hi >= uint64(requests) { // the quotient does not fit in 64 bits
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, uint64(requests))
	if rem != 0 {
		q++
	}
	return time.Duration(min(q, math.MaxInt64))
}

// Name returns name as a structured-field String, quoted and escaped; a
// name that is empty or not printable ASCII is "default".
func Name(name string) string {
	if name == "" {
		return `"default"`
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
	b.WriteByte('"')
	return b.String()
}

// PolicyValue returns a RateLimit-Policy value for the policy named name (a
// String from Name) admitting capacity requests, refilled from empty in
// refill: `"name";q=capacity;w=seconds` (w left out when refill is 0).
func PolicyValue(name string, capacity int64, refill time.Duration) string {
	v := name + ";q=" + strconv.FormatInt(capacity, 10)
	if refill > 0 {
		v += ";w=" + strconv.FormatInt(Seconds(refill), 10)
	}
	return v
}

// RateLimitValue returns a RateLimit value for the policy named name (a
// String from Name) with remaining requests left, back at rest after
// reset: `"name";r=remaining;t=seconds`.
func RateLimitValue(name string, remaining uint64, reset time.Duration) string {
	return name + ";r=" + strconv.FormatUint(remaining, 10) + ";t=" + strconv.FormatInt(Seconds(reset), 10)
}
