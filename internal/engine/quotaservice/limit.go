package quotaservice

import (
	"math/bits"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// ruleLimit returns the limit of rule that quota divides (the lowest rate
// of its limits), or nil and the blanket action that answers for it:
// AllowAll for no rule, a rule in shadow mode or one whose limits are all
// unlimited; DenyAll for a rule with a requests_per_unit 0 limit.
func ruleLimit(rule *config.Rule) (*config.Limit, Kind) {
	if rule == nil || rule.ShadowMode {
		return nil, AllowAll
	}
	var lowest *config.Limit
	for _, l := range rule.Limits {
		switch {
		case l.DenyAll:
			return nil, DenyAll
		case l.Unlimited:
		case lowest == nil || lowerRate(&l.Rate, &lowest.Rate):
			lowest = l
		}
	}
	if lowest == nil {
		return nil, AllowAll
	}
	return lowest, Share
}

type rate interface {
	Requests() int64
	Period() time.Duration
}

// lowerRate reports whether a's requests per period are fewer than b's.
func lowerRate(a, b rate) bool {
	// a.r / a.p < b.r / b.p  ⇔  a.r × b.p < b.r × a.p, in 128 bits.
	ah, al := bits.Mul64(uint64(a.Requests()), uint64(b.Period()))
	bh, bl := bits.Mul64(uint64(b.Requests()), uint64(a.Period()))
	return ah < bh || ah == bh && al < bl
}
