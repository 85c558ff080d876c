package metrics

import (
	"runtime/metrics"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// WithUpstreamNames, when on, adds the series that envoyproxy/ratelimit
// exports with USE_PROMETHEUS=true (through its default statsd-exporter
// mapping), so that dashboards and alerts written for it, such as Envoy
// Gateway's global rate limit dashboard, read ratelimitd unchanged:
//
//	ratelimit_service_rate_limit_total_hits{domain, key1, key2}     = ratelimitd_rule_hits_total
//	ratelimit_service_rate_limit_within_limit{domain, key1, key2}   = ratelimitd_rule_within_limit_hits_total
//	ratelimit_service_rate_limit_near_limit{domain, key1, key2}     = ratelimitd_rule_near_limit_hits_total
//	ratelimit_service_rate_limit_over_limit{domain, key1, key2}     = ratelimitd_rule_over_limit_hits_total
//	ratelimit_service_rate_limit_shadow_mode{domain, key1, key2}    = ratelimitd_rule_shadow_mode_hits_total
//	ratelimit_service_config_load_success                             policies put in force (files or xDS), the first included
//	ratelimit_service_config_load_error                               policies refused
//	go_memstats_gc_cpu_fraction                                       the share of the CPU time available since start that the GC used
//
// The rate_limit series are counters read from ratelimitd's per-rule
// series at each scrape (nothing more is counted per request). key1 and
// key2 are the first and second level of the rule's descriptor path as
// upstream's statsd key has them (key_value, or key), the request's values
// for a detailed_metric rule; key2 is empty (in PromQL, the same as absent,
// as upstream's mapping leaves it out) for a rule one level deep. As with
// upstream's mapping, a rule three or
// more levels deep (or whose keys and values hold dots) has no series under
// these names, only under ratelimitd's.
func WithUpstreamNames(on bool) Option { return func(m *Metrics) { m.upstreamNames = on } }

// upstreamCollector exports the per-rule counters under upstream's names.
type upstreamCollector struct {
	m           *Metrics
	rule        []*prometheus.Desc // by the order of Metrics.ruleVecs
	loadOK      *prometheus.Desc
	loadFailed  *prometheus.Desc
	gcFraction  *prometheus.Desc
	loads, errs *atomic.Uint64
}

var upstreamRuleNames = []string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"}

func newUpstreamCollector(m *Metrics) *upstreamCollector {
	c := &upstreamCollector{m: m, loads: &m.loads, errs: &m.loadErrors}
	for _, n := range upstreamRuleNames {
		name := "ratelimit_service_rate_limit_" + n
		help := "envoyproxy/ratelimit's " + n + " counter of the rule (ratelimitd_rule_* under upstream's name)."
		c.rule = append(c.rule, prometheus.NewDesc(name, help, []string{"domain", "key1", "key2"}, nil))
	}
	c.loadOK = prometheus.NewDesc("ratelimit_service_config_load_success", "Policies put in force (envoyproxy/ratelimit's name).", nil, nil)
	c.loadFailed = prometheus.NewDesc("ratelimit_service_config_load_error", "Policies refused (envoyproxy/ratelimit's name).", nil, nil)
	c.gcFraction = prometheus.NewDesc("go_memstats_gc_cpu_fraction", "The fraction of this program's available CPU time used by the GC since the program started.", nil, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.rule {
		ch <- d
	}
	ch <- c.loadOK
	ch <- c.loadFailed
	ch <- c.gcFraction
}

// Collect implements prometheus.Collector.
func (c *upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	// Under the lock that reloads take to drop series, so that reading
	// one does not bring a dropped one back.
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	vecs := c.m.ruleVecs()[:len(upstreamRuleNames)] // upstream has no others
	for l := range c.m.series {
		path := l.rule
		if l.descriptor != "" {
			if l.descriptor == OverflowDescriptor {
				continue
			}
			path = l.descriptor
		}
		key1, key2, _ := strings.Cut(path, ".")
		if strings.Contains(key2, ".") {
			continue
		}
		for i, v := range vecs {
			counter, err := v.GetMetricWithLabelValues(l.domain, l.rule, l.descriptor)
			if err != nil {
				continue
			}
			var d dto.Metric
			if counter.Write(&d) != nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.rule[i], prometheus.CounterValue, d.GetCounter().GetValue(), l.domain, key1, key2)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.loadOK, prometheus.CounterValue, float64(c.loads.Load()))
	ch <- prometheus.MustNewConstMetric(c.loadFailed, prometheus.CounterValue, float64(c.errs.Load()))
	ch <- prometheus.MustNewConstMetric(c.gcFraction, prometheus.GaugeValue, gcCPUFraction())
}

// gcCPUFraction is runtime.MemStats.GCCPUFraction, read from
// runtime/metrics without stopping the world: the GC's CPU time over the
// CPU time available (GOMAXPROCS × the time elapsed) since start.
func gcCPUFraction() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 || s[1].Value.Kind() != metrics.KindFloat64 || s[1].Value.Float64() == 0 {
		return 0
	}
	return s[0].Value.Float64() / s[1].Value.Float64()
}
