package httplimit

import (
	"net/http"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/api/ratelimitheader"
)

// setRateLimit sets the RateLimit-Policy and RateLimit headers of d, a
// decision on the request named by ds (see the package documentation):
// they describe the status d.MostRestrictive picks, the one whose rule a
// denial's Policy names.
func setRateLimit(h http.Header, d client.Decision, ds []client.Descriptor) {
	if d.Source == client.SourceLocal {
		h.Set(ratelimitheader.RateLimit, ratelimitheader.RateLimitValue(ratelimitheader.Name(d.Policy), 0, d.RetryAfter))
		return
	}
	i := d.MostRestrictive()
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
