package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

const day = 24 * time.Hour

var units = [...]struct {
	name string
	d    time.Duration
}{
	UnitNone:   {"none", 0},
	UnitSecond: {"second", time.Second},
	UnitMinute: {"minute", time.Minute},
	UnitHour:   {"hour", time.Hour},
	UnitDay:    {"day", day},
	UnitWeek:   {"week", 7 * day},
	UnitMonth:  {"month", 30 * day},
	UnitYear:   {"year", 365 * day},
}

// unitNames lists the units a policy file may name, for error messages.
const unitNames = "second, minute, hour, day, week, month, year"

// String returns the unit's name in a policy file ("second" … "year"), or
// "none" for UnitNone.
func (u Unit) String() string {
	if int(u) < len(units) {
		return units[u].name
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Duration returns the unit's length, as envoyproxy/ratelimit counts it:
// a second, a minute, an hour, 24 hours; a week is 7 days, a month 30 days
// and a year 365 days (no calendar: every month is as long as every other).
// UnitNone and unknown units have Duration 0.
func (u Unit) Duration() time.Duration {
	if int(u) < len(units) {
		return units[u].d
	}
	return 0
}

// parseUnit returns the unit a policy file names. Like envoyproxy/ratelimit
// it ignores case: "minute", "MINUTE" and "Minute" are the same unit.
func parseUnit(s string) (Unit, bool) {
	for u := UnitSecond; int(u) < len(units); u++ {
		if strings.EqualFold(s, units[u].name) {
			return u, true
		}
	}
	return UnitNone, false
}

// limitKey returns the Key of a limit with the arithmetic r: prefix, then
// the algorithm, requests, period and capacity, as in
// "token_bucket/600/1m0s/800". Two
// limits have the same key exactly when they decide alike. A window's
// capacity is its requests, so a window's key ends in its requests again.
func limitKey(prefix string, r *algorithms.Limit) string {
	var buf [80]byte
	b := append(buf[:0], prefix...)
	b = append(b, r.Algorithm().String()...)
	b = append(b, '/')
	b = strconv.AppendInt(b, r.Requests(), 10)
	b = append(b, '/')
	b = append(b, r.Period().String()...)
	b = append(b, '/')
	b = strconv.AppendInt(b, r.Capacity(), 10)
	return string(b)
}

// BucketName returns the Bucket of a limit with the arithmetic r (before
// any "#2" that tells it from another limit of its rule): prefix, then the
// kind of state its algorithm keeps — "fixed_window", "sliding_window",
// "concurrency", or "bucket" for token_bucket, leaky_bucket and
// leaky_bucket_queue, whose states are one — and its period (a
// concurrency's lease), as in "bucket/1h0m0s". Limits with the
// same BucketName read each other's states.
func BucketName(prefix string, r *algorithms.Limit) string {
	var buf [64]byte
	b := append(buf[:0], prefix...)
	switch alg := r.Algorithm(); alg {
	case algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.Concurrency:
		b = append(b, alg.String()...)
	default:
		b = append(b, "bucket"...)
	}
	b = append(b, '/')
	b = append(b, r.Period().String()...)
	return string(b)
}

// nameBuckets sets the Bucket of each of a rule's limits that keeps
// buckets: its BucketName, followed by "#n" for the nth limit (n ≥ 2) of
// the rule with that name.
func nameBuckets(limits []*Limit) {
	for i, l := range limits {
		if l.Unlimited || l.DenyAll {
			continue
		}
		l.Bucket = BucketName("", &l.Rate)
		n := 1
		for _, earlier := range limits[:i] {
			if earlier.Bucket != "" && BucketName("", &earlier.Rate) == l.Bucket {
				n++
			}
		}
		if n > 1 {
			l.Bucket += "#" + strconv.Itoa(n)
		}
	}
}

// unlimitedKey is the Key of every unlimited limit: they keep no bucket.
const unlimitedKey = "unlimited"

// denyAllKey is the Key of every requests_per_unit: 0 limit: they keep no
// bucket either.
const denyAllKey = "deny-all"

// InlinePrefix starts the Key and Bucket of every inline limit and of no
// policy limit, so that an inline limit never shares a bucket with a
// policy limit of the same arithmetic.
const InlinePrefix = "inline:"

// IsInlineKey reports whether k is the Key of an inline limit
// (NewInlineLimit) rather than of a policy's.
func IsInlineKey(k string) bool { return strings.HasPrefix(k, InlinePrefix) }

// NewInlineLimit returns a limit that a request carries itself rather than
// one from a policy file: requests per period with the algorithm alg and,
// for the bucket algorithms, a capacity of burst (0 means requests). The
// arguments are checked as algorithms.NewLimit checks them.
//
// The limit's Unit is UnitNone and its UnitMultiplier 0, as it has a period
// rather than a unit. Its Key and Bucket are "inline:" followed by the
// Key and Bucket a policy limit of the same arithmetic would have, so
// inline and policy limits never share a bucket.
func NewInlineLimit(name string, alg algorithms.Algorithm, requests int64, period time.Duration, burst int64) (*Limit, error) {
	r, err := algorithms.NewLimit(alg, requests, period, burst)
	if err != nil {
		return nil, fmt.Errorf("inline limit %q: %w", name, err)
	}
	return &Limit{Name: name, Rate: r, Key: limitKey(InlinePrefix, &r), Bucket: BucketName(InlinePrefix, &r)}, nil
}
