package httplimit

import (
	"net/http"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/ratelimitheader"
)

// setRateLimit sets the RateLimit-Policy and RateLimit headers of d, a
// decision on the request named by ds (see the package documentation).
func setRateLimit(h http.Header, d client.Decision, ds []client.Descriptor) {
	if d.Source == client.SourceLocal {
		h.Set(ratelimitheader.RateLimit, ratelimitheader.RateLimitValue(ratelimitheader.Name(d.Policy), 0, d.RetryAfter))
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
	name = ratelimitheader.Name(name)
	capacity := int64(rule.GetBurst())
	if capacity == 0 {
		capacity = int64(rule.GetRequests())
	}
	refill := ratelimitheader.Refill(capacity, int64(rule.GetRequests()), rule.GetPeriod().AsDuration())
	h.Set(ratelimitheader.Policy, ratelimitheader.PolicyValue(name, capacity, refill))
	h.Set(ratelimitheader.RateLimit, ratelimitheader.RateLimitValue(name, st.GetRemaining(), st.GetResetAfter().AsDuration()))
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
