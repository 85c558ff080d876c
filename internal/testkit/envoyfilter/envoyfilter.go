// Package envoyfilter does, for tests, what Envoy's rate_limit_quota HTTP
// filter does with one bucket and the assignments an RLQS server sends it,
// on a clock the caller passes in (Unix nanoseconds): tests hold
// ratelimitd's assignments to it rather than to an idealised client. It
// is our own code, written from Envoy's source (envoyproxy/envoy):
//
//   - source/extensions/filters/http/rate_limit_quota/global_client_impl.cc:
//     createTokenBucketFromAction (the fill rate is tokens_per_fill divided
//     by the whole seconds of fill_interval), protoTokenBucketsEq and
//     shouldReplaceTokenBucket (a token bucket is kept when max_tokens,
//     tokens_per_fill and the nanoseconds of fill_interval are unchanged;
//     otherwise a new one starts), onQuotaResponseImpl (a blanket rule
//     drops the token bucket; abandon_action erases the bucket),
//     startActionExpirationTimer (each assignment re-arms the expiry from
//     assignment_time_to_live.seconds() only), onActionExpirationTimer and
//     onFallbackExpirationTimer (on expiry, the configured
//     expired_assignment_behavior for its time, else the default action),
//     createBucketImpl and getUsageFromBucket (a bucket's first request is
//     reported at once; time_elapsed is whole seconds, truncated);
//   - source/common/common/token_bucket_impl.cc, AtomicTokenBucketImpl: a
//     new token bucket starts full (init_fill), refills continuously at
//     its rate up to max_tokens, in double-precision seconds; a request
//     takes one token or is denied;
//   - source/extensions/filters/http/rate_limit_quota/filter.cc: a request
//     of a bucket with no assignment is decided by no_assignment_behavior
//     (allow all unless configured).
//
// The default and fallback behaviours modelled are blanket rules (allow
// all, deny all), which is what Envoy's configuration examples use.
package envoyfilter

import (
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config is the filter's configuration of the bucket.
type Config struct {
	// NoAssignment is no_assignment_behavior's blanket rule (Envoy's
	// default: ALLOW_ALL, the zero value).
	NoAssignment typev3.RateLimitStrategy_BlanketRule
	// Expired, when set, is expired_assignment_behavior's
	// fallback_rate_limit, applied for ExpiredFor once an assignment
	// expires; unset, an expired assignment reverts to NoAssignment.
	Expired    *typev3.RateLimitStrategy_BlanketRule
	ExpiredFor time.Duration
}

// Filter is one bucket of one Envoy's filter. It is not safe for
// concurrent use.
type Filter struct {
	cfg Config
	// exists: the bucket is in the filter's cache (its first request has
	// been seen, and no abandon_action has erased it).
	exists bool
	// action is the cached assignment's strategy (nil: none, the default
	// applies); until is when it expires (the timer re-armed by each
	// assignment); fallbackUntil is when the expired_assignment_behavior
	// applied since then ends.
	action        *typev3.RateLimitStrategy
	until         int64
	fallback      bool
	fallbackUntil int64

	bucket *tokenBucket

	allowed, denied uint64
	lastReport      int64
	origin          int64 // Envoy's monotonic clock starts here

	// Starts are the token buckets started, in order: when and how many
	// tokens each held at once (its max_tokens).
	Starts []Start
}

// Start is a new token bucket, full.
type Start struct {
	At        int64
	MaxTokens int64
}

// New returns the filter's bucket, not yet seen, on a clock starting at
// origin.
func New(cfg Config, origin int64) *Filter { return &Filter{cfg: cfg, origin: origin} }

// tokenBucket is AtomicTokenBucketImpl: the time (seconds) at which the
// bucket would have been empty; it holds min(max, (now - at) × rate).
type tokenBucket struct {
	maxTokens float64
	rate      float64 // tokens a second
	at        float64
	// the assignment it was made from, for protoTokenBucketsEq
	maxTokensField, tokensPerFill uint32
	fillNanos                     int32
}

func (f *Filter) seconds(now int64) float64 { return float64(now-f.origin) / 1e9 }

// newTokenBucket is createTokenBucketFromAction: full at now.
func (f *Filter) newTokenBucket(tb *typev3.TokenBucket, now int64) *tokenBucket {
	fill := tb.GetFillInterval()
	wholeSeconds := (time.Duration(fill.GetSeconds())*time.Second + time.Duration(fill.GetNanos())) / time.Second
	rate := float64(tb.GetTokensPerFill().GetValue()) / float64(wholeSeconds) // +Inf for 0s, as in C++
	rate = math.Max(math.Abs(rate), 1e-9)                                     // kMinFillRate: a floor
	b := &tokenBucket{maxTokens: float64(tb.GetMaxTokens()), rate: rate,
		maxTokensField: tb.GetMaxTokens(), tokensPerFill: tb.GetTokensPerFill().GetValue(), fillNanos: fill.GetNanos()}
	b.at = f.seconds(now) - b.maxTokens/b.rate // init_fill
	f.Starts = append(f.Starts, Start{At: now, MaxTokens: int64(tb.GetMaxTokens())})
	return b
}

// equal is protoTokenBucketsEq: the seconds of fill_interval are not
// compared.
func (b *tokenBucket) equal(tb *typev3.TokenBucket) bool {
	return b.maxTokensField == tb.GetMaxTokens() && b.tokensPerFill == tb.GetTokensPerFill().GetValue() &&
		b.fillNanos == tb.GetFillInterval().GetNanos()
}

// consume takes one token at now, if the bucket holds one.
func (b *tokenBucket) consume(now float64) bool {
	if now <= b.at {
		return false
	}
	total := math.Min(b.maxTokens, (now-b.at)*b.rate)
	if total < 1 {
		return false
	}
	b.at = now - (total-1)/b.rate
	return true
}

// Request decides one request of the bucket at now. first says that the
// request created the bucket, which the filter reports at once (Report
// with no time elapsed). Admitted without an assignment in force is
// assigned false.
func (f *Filter) Request(now int64) (admitted, first, assigned bool) {
	f.expire(now)
	if !f.exists {
		// createBucket: decided by no_assignment_behavior, counted, and
		// reported at once.
		f.exists, f.lastReport = true, now
		ok := f.cfg.NoAssignment != typev3.RateLimitStrategy_DENY_ALL
		f.count(ok)
		return ok, true, false
	}
	var ok bool
	switch {
	case f.action == nil:
		ok = f.cfg.NoAssignment != typev3.RateLimitStrategy_DENY_ALL
	case f.action.GetTokenBucket() != nil:
		ok, assigned = f.bucket.consume(f.seconds(now)), true
	default:
		ok, assigned = f.action.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL, !f.fallback
	}
	f.count(ok)
	return ok, false, assigned
}

func (f *Filter) count(ok bool) {
	if ok {
		f.allowed++
	} else {
		f.denied++
	}
}

// expire runs the expiry timers due by now.
func (f *Filter) expire(now int64) {
	if f.action != nil && !f.fallback && now >= f.until {
		if f.cfg.Expired == nil {
			f.action, f.bucket = nil, nil // the default action
			return
		}
		// The fallback (a blanket rule here: no token bucket).
		rule := *f.cfg.Expired
		f.action = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
		f.bucket, f.fallback, f.fallbackUntil = nil, true, f.until+int64(f.cfg.ExpiredFor)
	}
	if f.fallback && now >= f.fallbackUntil {
		f.action, f.bucket, f.fallback = nil, nil, false
	}
}

// Receive applies one of the server's bucket actions at now.
func (f *Filter) Receive(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now int64) {
	f.expire(now)
	if !f.exists {
		return // "an unexpected bucket that isn't present in the bucket cache"
	}
	if a.GetAbandonAction() != nil {
		*f = Filter{cfg: f.cfg, origin: f.origin, Starts: f.Starts} // erased
		return
	}
	q := a.GetQuotaAssignmentAction()
	if q == nil {
		return
	}
	s := q.GetRateLimitStrategy()
	switch s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		f.bucket = nil
	case *typev3.RateLimitStrategy_TokenBucket:
		if f.bucket == nil || !f.bucket.equal(s.GetTokenBucket()) {
			f.bucket = f.newTokenBucket(s.GetTokenBucket(), now)
		}
	default:
		return // requests_per_time_unit, or none: logged and skipped by the filter
	}
	f.action, f.fallback = s, false
	f.until = now + q.GetAssignmentTimeToLive().GetSeconds()*int64(time.Second)
}

// Report returns the bucket's usage since its last report at now, as the
// filter reports it (time_elapsed in whole seconds, truncated), and starts
// the next; nil when the bucket is not in the cache.
func (f *Filter) Report(bucket map[string]string, now int64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	if !f.exists {
		return nil
	}
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: bucket},
		NumRequestsAllowed: f.allowed, NumRequestsDenied: f.denied,
		TimeElapsed: durationpb.New(time.Duration(now-f.lastReport) / time.Second * time.Second),
	}
	f.allowed, f.denied, f.lastReport = 0, 0, now
	return u
}

// Applies returns the token bucket the filter applies at now (max tokens,
// tokens per fill, fill interval), or the blanket rule; ok is false with
// no assignment in force (the default or fallback applies).
func (f *Filter) Applies(now int64) (maxTokens, tokensPerFill uint32, fill time.Duration, rule typev3.RateLimitStrategy_BlanketRule, ok bool) {
	f.expire(now)
	if f.action == nil || f.fallback {
		return 0, 0, 0, 0, false
	}
	if tb := f.action.GetTokenBucket(); tb != nil {
		return tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), 0, true
	}
	return 0, 0, 0, f.action.GetBlanketRule(), true
}
