package console

import (
	"sort"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
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
	// sampleBudget bounds the share of one core that sampling may take:
	// after a sample that took d, the next waits at least d/sampleBudget
	// (with 10,000 busy rules, a sample every few seconds).
	sampleBudget = 0.02
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

// live samples the per-rule hit counters of the metrics, only while
// someone looks: a sample is taken when a view is asked for and the last
// sample is older than sampleEvery (or, for a policy so large that a
// sample is costly, than the sampleBudget allows). It keeps a minute of totals, and a
// minute of rates for the rules that were busiest at the last sample.
type live struct {
	source func(func(metrics.RuleTotal))

	mu     sync.Mutex
	gap    time.Duration // the shortest time until the next sample
	last   time.Time
	prev   map[ruleID]counts
	total  []Rate
	series map[ruleID][]Rate // the busiest rules' recent rates
	top    []RuleRates
}

func newLive(source func(func(metrics.RuleTotal))) *live {
	return &live{source: source, series: map[ruleID][]Rate{}}
}

func (l *live) view(now time.Time) LiveView {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) >= max(l.gap, sampleEvery) {
		took := time.Now()
		l.sample(now)
		l.gap = time.Duration(float64(time.Since(took)) / sampleBudget)
	}
	v := LiveView{Total: append([]Rate{}, l.total...), Rules: make([]RuleRates, len(l.top)), RulesSeen: len(l.prev)}
	for i, r := range l.top {
		r.Series = append([]Rate{}, l.series[ruleID{r.Domain, r.Rule}]...)
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
	hits := map[ruleID]float64{} // hits since the last sample: whole numbers, so ties are exact
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
		if n := (c.within - p.within) + (c.over - p.over); n > 0 {
			hits[id] = n
			rates = append(rates, RuleRates{Domain: id.domain, Rule: id.rule, Now: r})
		}
	}
	l.total = appendRing(l.total, total)
	sort.Slice(rates, func(i, j int) bool {
		if a, b := hits[ruleID{rates[i].Domain, rates[i].Rule}], hits[ruleID{rates[j].Domain, rates[j].Rule}]; a != b {
			return a > b
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

// read returns every rule's hit counters.
func (l *live) read() map[ruleID]counts {
	out := map[ruleID]counts{}
	l.source(func(t metrics.RuleTotal) {
		out[ruleID{t.Domain, t.Rule}] = counts{within: t.Within, over: t.Over, shadow: t.Shadow}
	})
	return out
}
