package console

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	// liveSamples is how many samples the live view keeps: a minute of
	// one-second samples.
	liveSamples = 60
	// liveRules is how many rules the live view draws: the busiest.
	liveRules = 20
	// sampleEvery is the shortest time between two samples; views asked
	// for sooner share the last one.
	sampleEvery = 900 * time.Millisecond
)

// Rate is hits per second over one sample's interval: admitted, denied
// (the request was refused) and shadow-denied (a shadow rule, or global
// shadow mode, would have denied them; they were let through).
type Rate struct {
	// At is the end of the interval, in Unix milliseconds.
	At           int64   `json:"t"`
	Admitted     float64 `json:"admitted"`
	Denied       float64 `json:"denied"`
	ShadowDenied float64 `json:"shadow_denied"`
}

// RuleRates is one rule's rates: the latest and the last minute's.
type RuleRates struct {
	Domain string `json:"domain"`
	// Rule is the metrics' rule label: the rule's descriptor path.
	Rule   string `json:"rule"`
	Now    Rate   `json:"now"`
	Series []Rate `json:"series"`
}

// LiveView is the JSON of /console/api/live.
type LiveView struct {
	// Total is every rule's hits together, oldest first.
	Total []Rate `json:"total"`
	// Rules are the busiest rules now, busiest first, at most liveRules.
	Rules []RuleRates `json:"rules"`
	// RulesSeen is how many rules have counted hits since start.
	RulesSeen int `json:"rules_seen"`
}

type ruleID struct{ domain, rule string }

type counts struct{ within, over, shadow float64 }

// live samples the per-rule hit counters of a metrics registry, only while
// someone looks: a sample is taken when a view is asked for and the last
// sample is older than sampleEvery. It keeps a minute of totals, and a
// minute of rates for the rules that were busiest at the last sample.
type live struct {
	g prometheus.Gatherer

	mu     sync.Mutex
	last   time.Time
	prev   map[ruleID]counts
	total  []Rate
	series map[ruleID][]Rate // the busiest rules' recent rates
	top    []RuleRates
}

func newLive(g prometheus.Gatherer) *live {
	return &live{g: g, series: map[ruleID][]Rate{}}
}

func (l *live) view(now time.Time) LiveView {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) >= sampleEvery {
		l.sample(now)
	}
	v := LiveView{Total: append([]Rate(nil), l.total...), Rules: make([]RuleRates, len(l.top)), RulesSeen: len(l.prev)}
	for i, r := range l.top {
		r.Series = append([]Rate(nil), l.series[ruleID{r.Domain, r.Rule}]...)
		v.Rules[i] = r
	}
	return v
}

// sample reads the counters and turns the change since the last sample
// into rates. The first sample only sets the baseline.
func (l *live) sample(now time.Time) {
	cur := l.read()
	first := l.prev == nil
	elapsed := now.Sub(l.last).Seconds()
	prev := l.prev
	l.prev, l.last = cur, now
	if first || elapsed <= 0 {
		return
	}
	at := now.UnixMilli()
	total := Rate{At: at}
	var rates []RuleRates
	for id, c := range cur {
		p := prev[id]
		r := Rate{At: at,
			Admitted:     (c.within - p.within) / elapsed,
			ShadowDenied: (c.shadow - p.shadow) / elapsed,
		}
		r.Denied = (c.over-p.over)/elapsed - r.ShadowDenied
		total.Admitted += r.Admitted
		total.Denied += r.Denied
		total.ShadowDenied += r.ShadowDenied
		if r.Admitted+r.Denied+r.ShadowDenied > 0 {
			rates = append(rates, RuleRates{Domain: id.domain, Rule: id.rule, Now: r})
		}
	}
	l.total = appendRing(l.total, total)
	sort.Slice(rates, func(i, j int) bool {
		a, b := rates[i].Now, rates[j].Now
		if sa, sb := a.Admitted+a.Denied+a.ShadowDenied, b.Admitted+b.Denied+b.ShadowDenied; sa != sb {
			return sa > sb
		}
		if rates[i].Domain != rates[j].Domain {
			return rates[i].Domain < rates[j].Domain
		}
		return rates[i].Rule < rates[j].Rule
	})
	if len(rates) > liveRules {
		rates = rates[:liveRules]
	}
	series := make(map[ruleID][]Rate, len(rates))
	for _, r := range rates {
		id := ruleID{r.Domain, r.Rule}
		series[id] = appendRing(l.series[id], r.Now)
	}
	l.series, l.top = series, rates
}

func appendRing(s []Rate, r Rate) []Rate {
	if len(s) == liveSamples {
		s = append(s[:0], s[1:]...)
	}
	return append(s, r)
}

// read sums the ratelimitd_rule_* hit counters by domain and rule (over
// detailed_metric's per-descriptor series too).
func (l *live) read() map[ruleID]counts {
	out := map[ruleID]counts{}
	families, err := l.g.Gather()
	if err != nil && len(families) == 0 {
		return out
	}
	for _, f := range families {
		var pick func(*counts) *float64
		switch f.GetName() {
		case "ratelimitd_rule_within_limit_hits_total":
			pick = func(c *counts) *float64 { return &c.within }
		case "ratelimitd_rule_over_limit_hits_total":
			pick = func(c *counts) *float64 { return &c.over }
		case "ratelimitd_rule_shadow_mode_hits_total":
			pick = func(c *counts) *float64 { return &c.shadow }
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			var id ruleID
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "domain":
					id.domain = lp.GetValue()
				case "rule":
					id.rule = lp.GetValue()
				}
			}
			c := out[id]
			*pick(&c) += m.GetCounter().GetValue()
			out[id] = c
		}
	}
	return out
}
