package httplimit

import (
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// setRateLimit sets the RateLimit-Policy and RateLimit headers of d, a
// decision on the request named by ds (see the package documentation).
func setRateLimit(h http.Header, d client.Decision, ds []client.Descriptor) {
	if d.Source == client.SourceLocal {
		h.Set("RateLimit", sfString(d.Policy)+";r=0;t="+strconv.FormatInt(ceilSeconds(d.RetryAfter), 10))
		return
	}
	i := mostRestrictive(d.Response.GetStatuses())
	if i < 0 {
		return
	}
	st := d.Response.GetStatuses()[i]
	rule := st.GetRule()
	name := rule.GetName()
	if name == "" && i < len(ds) {
		name = ds[i].String()
	}
	name = sfString(name)
	policy := name + ";q=" + strconv.FormatUint(uint64(capacity(rule)), 10)
	if w := refill(rule); w > 0 {
		policy += ";w=" + strconv.FormatInt(ceilSeconds(w), 10)
	}
	h.Set("RateLimit-Policy", policy)
	h.Set("RateLimit", name+";r="+strconv.FormatUint(st.GetRemaining(), 10)+
		";t="+strconv.FormatInt(ceilSeconds(st.GetResetAfter().AsDuration()), 10))
}

// mostRestrictive returns the index of the status the headers describe, as
// the daemon's Envoy adapter chooses it: a limit over capacity, else the
// denial with the longest retry_after, else the limit with the fewest
// requests left, the first of equals; unmatched, unlimited and shadow-mode
// statuses never count. -1 when none does.
func mostRestrictive(sts []*ratelimitv1.DescriptorStatus) int {
	best, bestRank := -1, -1
	for i, st := range sts {
		if !st.GetMatched() || st.GetRule() == nil || st.GetRule().GetUnlimited() || st.GetShadow() {
			continue
		}
		rank := 0
		switch st.GetCode() {
		case ratelimitv1.Code_CODE_OVER_CAPACITY:
			rank = 2
		case ratelimitv1.Code_CODE_OVER_LIMIT:
			rank = 1
		}
		if best >= 0 {
			b := sts[best]
			switch {
			case rank < bestRank:
				continue
			case rank == bestRank && rank == 1 && st.GetRetryAfter().AsDuration() <= b.GetRetryAfter().AsDuration():
				continue
			case rank == bestRank && rank != 1 && st.GetRemaining() >= b.GetRemaining():
				continue
			}
		}
		best, bestRank = i, rank
	}
	return best
}

// capacity is what a full bucket or a fresh window admits: burst for the
// bucket algorithms, else requests.
func capacity(r *ratelimitv1.Rule) uint32 {
	if b := r.GetBurst(); b > 0 {
		return b
	}
	return r.GetRequests()
}

// refill is how long an empty bucket or window takes to fill again:
// capacity × period / requests, rounded up; 0 without a rate.
func refill(r *ratelimitv1.Rule) time.Duration {
	if r.GetRequests() == 0 {
		return 0
	}
	period := r.GetPeriod().AsDuration()
	if period <= 0 {
		return 0
	}
	requests := uint64(r.GetRequests())
	hi, lo := bits.Mul64(uint64(capacity(r)), uint64(period))
	if hi >= requests { // the quotient does not fit in 64 bits
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, requests)
	if rem != 0 {
		q++
	}
	return time.Duration(min(q, math.MaxInt64))
}

// sfString quotes name as a structured-field String (RFC 9651); a name
// that is empty or not printable ASCII becomes "default", as the daemon's
// Envoy adapter names it.
func sfString(name string) string {
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
