// Package metrics is ratelimitd's Prometheus instrumentation, on a
// registry of its own served by Handler:
//
//   - per rule, the hits it decided, fed by the engine's observer
//     (Observe), so that no decision is made twice;
//   - the latency of decisions and the count of them by outcome;
//   - the memory store's buckets, bytes and evictions
//     (MemoryStoreCollectors);
//   - policy and certificate reloads (PolicyLoaded, PolicyReloaded,
//     CertificateLoaded);
//   - gRPC server requests by method and code, with latency, from
//     go-grpc-middleware's Prometheus provider (UnaryServerInterceptor,
//     StreamServerInterceptor);
//   - the running build (ratelimitd_build_info, from internal/observe/buildinfo);
//   - the Go runtime's and the process's standard metrics.
//
// # Per-rule hits
//
// Every status of a decided request whose descriptor matched a policy rule
// (engine.Status.Rule) counts its hits — its engine.Status.Cost, so a
// request of cost 5 counts 5 and a peek counts nothing — on the rule's
// series, as envoyproxy/ratelimit counts them:
//
//	ratelimitd_rule_hits_total               every hit
//	ratelimitd_rule_within_limit_hits_total  hits of a status its rule admitted
//	ratelimitd_rule_near_limit_hits_total    of those, the hits charged beyond the near-limit ratio
//	ratelimitd_rule_over_limit_hits_total    hits of a status its rule denied (over capacity included)
//	ratelimitd_rule_shadow_mode_hits_total   of those, the hits not denied: a shadow_mode rule, or global shadow mode
//
// so hits = within_limit + over_limit. Usage charged after the fact
// (engine.Op) counts on series of its own:
//
//	ratelimitd_rule_overdraft_hits_total     of the hits, those charged in full as overdraft (they count in within or over too)
//	ratelimitd_rule_refunded_hits_total      hits given back (is_negative_hits, OPERATION_REFUND); not hits
//	ratelimitd_rule_checks_total             checks (hits_addend 0 on Envoy's API, OPERATION_CHECK); not hits
//	ratelimitd_rule_over_limit_checks_total  of those, the checks denied: the budget spent or in debt
//
// # Units in flight
//
// A rule whose deciding limit is a concurrency (algorithm: concurrency)
// has two gauges beside its counters, with the same labels:
//
//	ratelimitd_rule_in_flight        units in flight in the bucket of the rule's last decision, as that decision left them
//	ratelimitd_rule_in_flight_limit  that decision's max_in_flight
//
// in_flight is max_in_flight − remaining of the rule's last status (not a
// peek) whose deciding limit is the concurrency: a charge, a check, a
// refund or an overdraft. Its remaining is the bucket as the request left
// it (a charge its rule admitted in a request another descriptor denied
// took nothing, and reports the bucket uncharged: internal/store). It is a
// value as of that decision: units released or expired by their lease
// since then show at the next one. A limit in debt (an overdraft beyond
// max_in_flight) shows as full, in_flight = in_flight_limit. A rule
// counts one bucket for all requests only when its descriptor names a
// value (or the rule is reached through one); a key-only rule has a bucket
// per value, and its in_flight is the last decided value's — per value
// with detailed_metric: true, whose series are capped as its counters are.
// The gauges appear at a rule's first such decision, and a reload drops
// them all (they come back at the next decision under the new policy).
//
// A status counts under the kind of charge its deciding limit made
// (engine.Status.Kind). A descriptor whose rule's limits
// were all replaced (rate_limit.replaces) by another matched rule's counts
// nothing, as nothing of its rule decided it. A status is counted by its own
// rule's verdict: in a request denied by another descriptor, a descriptor
// its rule admitted counts as within_limit although, the request being
// denied, it was charged nothing.
//
// near_limit follows envoyproxy/ratelimit: with capacity C (the deciding
// limit's burst, or requests for a window) and ratio r, the threshold is
// T = floor(r·C); after a request that was admitted and charged, with
// used = C − remaining, the hits beyond T are near-limit hits:
// min(cost, used − T) when used > T, else none. With C = 10 and r = 0.8,
// the 9th and 10th hits of a window are near-limit. Unlimited and deny-all
// limits are never near their limit.
//
// Labels: domain; rule, the rule's Rule.StatKey without the domain (the
// descriptor path as the policy wrote it: "path_/orders.user"), which is
// bounded by the policy; and descriptor, empty except for a rule with
// detailed_metric: true, whose hits are counted per request value instead,
// under the request's entries as key_value joined by dots
// ("path_/orders.user_alice"). That is as many series as there are
// values, which is why a policy has to ask for it, and why their number is
// capped: a detailed_metric rule has at most WithMaxDetailedSeries (default
// DefaultMaxDetailedSeries, 1000) descriptor series; the hits of every
// further value count on one series whose descriptor is OverflowDescriptor
// ("_overflow_"). Descriptors that matched no rule, and inline limits, which
// a request names itself, are counted in the decision totals only. No other
// label takes its value from a request: domain and rule are the policy's,
// and the gRPC metrics' method labels are the server's registered methods.
//
// # Reloads
//
// A successful reload (PolicyReloaded) drops the series of every rule the
// new policy no longer has, and every detailed_metric series (the cap starts
// again from zero); the series of a rule it keeps, named by the same domain
// and descriptor path, count on. A request deciding while the reload happens
// may count on the previous policy's series, or in a series the reload just
// dropped.
package metrics

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// namespace prefixes every metric of ratelimitd's own.
const namespace = "ratelimitd"

// DefaultNearLimitRatio is the near-limit ratio of envoyproxy/ratelimit.
const DefaultNearLimitRatio = 0.8

// DefaultMaxDetailedSeries is the default cap on the descriptor series of
// one detailed_metric rule.
const DefaultMaxDetailedSeries = 1000

// OverflowDescriptor is the descriptor label of the series that counts a
// detailed_metric rule's hits beyond its cap of series.
const OverflowDescriptor = "_overflow_"

// DecisionBuckets are the upper bounds, in seconds, of the decision
// latency histogram: 1µs to 10ms, as an in-process decision takes well
// under a microsecond to a few.
var DecisionBuckets = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2}

// GRPCBuckets are the upper bounds, in seconds, of the gRPC handling
// latency histogram: 50µs to 1s.
var GRPCBuckets = []float64{5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1}

// Metrics holds the daemon's metrics. It is safe for concurrent use.
type Metrics struct {
	reg         *prometheus.Registry
	nearRatio   float64
	maxDetailed int

	hits, within, near, over, shadow        *prometheus.CounterVec
	overdraft, refunded, checks, checksOver *prometheus.CounterVec
	inFlight, inFlightLimit                 *prometheus.GaugeVec
	rules                                   atomic.Pointer[sync.Map] // *config.Rule -> *ruleCounters

	// series holds the labels of every per-rule series there is, so that
	// a reload can drop those the new policy no longer has. mu serializes
	// series creation with reloads.
	mu     sync.Mutex
	series map[seriesLabels]struct{}

	latency      prometheus.Histogram
	allowed      prometheus.Counter
	denied       prometheus.Counter
	reloads      *prometheus.CounterVec
	lastReload   prometheus.Gauge
	lastReloadOK prometheus.Gauge
	tlsReloads   *prometheus.CounterVec
	certExpiry   prometheus.Gauge
	grpc         *grpcprom.ServerMetrics
	tlsOnce      sync.Once

	upstreamNames     bool          // WithUpstreamNames
	loads, loadErrors atomic.Uint64 // policies put in force, and refused
}

// Option configures Metrics.
type Option func(*Metrics)

// WithNearLimitRatio sets the near-limit ratio r (default 0.8), which must
// be in (0, 1]: hits that take a bucket beyond r of its capacity are
// near-limit hits.
func WithNearLimitRatio(r float64) Option { return func(m *Metrics) { m.nearRatio = r } }

// WithMaxDetailedSeries sets the most descriptor series that one
// detailed_metric rule has (default DefaultMaxDetailedSeries; n < 1 means
// the default). Hits of further values count on the rule's
// OverflowDescriptor series.
func WithMaxDetailedSeries(n int) Option { return func(m *Metrics) { m.maxDetailed = n } }

// New returns the daemon's metrics, registered on a new registry.
func New(opts ...Option) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), nearRatio: DefaultNearLimitRatio, series: map[seriesLabels]struct{}{}}
	for _, opt := range opts {
		opt(m)
	}
	if m.maxDetailed < 1 {
		m.maxDetailed = DefaultMaxDetailedSeries
	}
	m.rules.Store(new(sync.Map))

	m.newRuleCounters()
	decisions := m.newDecisionMetrics()
	m.newPolicyMetrics()
	m.newTLSMetrics()

	m.grpc = grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace(namespace)),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace(namespace), grpcprom.WithHistogramBuckets(GRPCBuckets)),
	)

	m.reg.MustRegister(m.hits, m.within, m.near, m.over, m.shadow, m.overdraft, m.refunded, m.checks, m.checksOver, m.inFlight, m.inFlightLimit, m.latency, decisions,
		m.reloads, m.lastReload, m.lastReloadOK, m.grpc, buildInfo(buildinfo.Read()),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if m.upstreamNames {
		m.reg.MustRegister(newUpstreamCollector(m))
	}
	return m
}

// newRuleCounters makes the counters of each rule's hits, by domain,
// rule and descriptor.
func (m *Metrics) newRuleCounters() {
	ruleLabels := []string{"domain", "rule", "descriptor"}
	ruleCounter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "rule", Name: name, Help: help}, ruleLabels)
	}
	m.hits = ruleCounter("hits_total", "Hits (request cost) on descriptors that matched the rule.")
	m.within = ruleCounter("within_limit_hits_total", "Hits of descriptors the rule admitted.")
	m.near = ruleCounter("near_limit_hits_total", "Hits admitted and charged beyond the near-limit ratio of the deciding limit's capacity.")
	m.over = ruleCounter("over_limit_hits_total", "Hits of descriptors the rule denied (over capacity included).")
	m.shadow = ruleCounter("shadow_mode_hits_total", "Hits the rule denied that were let through: a shadow_mode rule, or global shadow mode.")
	m.overdraft = ruleCounter("overdraft_hits_total", "Hits charged in full as overdraft charges, whatever was left (counted in hits_total too).")
	m.refunded = ruleCounter("refunded_hits_total", "Hits given back by refunds (not counted in hits_total).")
	m.checks = ruleCounter("checks_total", "Checks: would a charge of 1 be admitted? (not counted in hits_total).")
	m.checksOver = ruleCounter("over_limit_checks_total", "Checks denied: the limit was spent or in debt.")
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "rule", Name: "in_flight",
		Help: "A concurrency rule's units in flight in the bucket of its last decision, as that decision left them (at most in_flight_limit)."}, ruleLabels)
	m.inFlightLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "rule", Name: "in_flight_limit",
		Help: "A concurrency rule's max_in_flight, as of its last decision."}, ruleLabels)
}

// newDecisionMetrics makes the decisions' latency and their counts, by
// code, and returns the counts' vector.
func (m *Metrics) newDecisionMetrics() *prometheus.CounterVec {
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Name: "decision_duration_seconds",
		Help:    "Time the engine took to decide a request: validation, matching, the store and the response.",
		Buckets: DecisionBuckets,
	})
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "decisions_total",
		Help: `Requests decided, by overall code: "ok" or "over_limit".`,
	}, []string{"code"})
	m.allowed, m.denied = decisions.WithLabelValues("ok"), decisions.WithLabelValues("over_limit")
	return decisions
}

// newPolicyMetrics makes the policy's reloads, by result, and when the
// one in force was loaded.
func (m *Metrics) newPolicyMetrics() {
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "policy", Name: "reloads_total",
		Help: `Policy reloads after the first load, by result: "success" or "failure" (the previous policy kept serving).`,
	}, []string{"result"})
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "policy", Name: "last_reload_success_timestamp_seconds",
		Help: "When the policy in force was loaded (the first load or the last successful reload), in seconds since the Unix epoch.",
	})
	m.lastReloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "policy", Name: "last_reload_successful",
		Help: "1 when the last load or reload of the policy succeeded, 0 when it failed.",
	})
}

// newTLSMetrics makes the gRPC certificate's reloads, by result, and its
// expiry.
func (m *Metrics) newTLSMetrics() {
	m.tlsReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "tls", Name: "reloads_total",
		Help: `Reloads of the gRPC server's certificate, key and client CAs after the first load, by result: "success" or "failure" (the previous ones kept serving).`,
	}, []string{"result"})
	m.certExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "tls", Name: "certificate_expiry_timestamp_seconds",
		Help: "When the gRPC server's certificate in use expires (its NotAfter), in seconds since the Unix epoch.",
	})
}

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry returns the registry the metrics are on, so that more
// collectors can join them.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// UnaryServerInterceptor counts and times unary gRPC calls:
// ratelimitd_grpc_server_started_total, ratelimitd_grpc_server_handled_total
// (with grpc_code) and ratelimitd_grpc_server_handling_seconds, labelled by
// grpc_type, grpc_service and grpc_method.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return m.grpc.UnaryServerInterceptor()
}

// StreamServerInterceptor does for streams what UnaryServerInterceptor does
// for unary calls, and counts their messages
// (ratelimitd_grpc_server_msg_received_total, _msg_sent_total).
func (m *Metrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return m.grpc.StreamServerInterceptor()
}

// Store is what MemoryStoreCollectors reads: the memory store's size,
// bounds and evictions.
type Store interface {
	Len() int
	MaxBuckets() int
	Bytes() int64
	MaxBytes() int64
	Evictions() uint64
}

// MemoryStoreCollectors returns the memory store's metrics, read at each
// scrape: ratelimitd_buckets (held now), ratelimitd_buckets_max (the bound
// on them), ratelimitd_bucket_bytes (the bytes of bucket state held, keys
// included, as the store accounts them), ratelimitd_bucket_bytes_max (the
// bound on them) and ratelimitd_bucket_evictions_total (buckets not yet at
// rest evicted to stay within the bounds).
func MemoryStoreCollectors(s Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "buckets", Help: "Buckets held in memory."},
			func() float64 { return float64(s.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "buckets_max", Help: "The most buckets held before buckets are evicted (--max-buckets)."},
			func() float64 { return float64(s.MaxBuckets()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "bucket_bytes", Help: "Bytes of bucket state held in memory, keys included."},
			func() float64 { return float64(s.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "bucket_bytes_max", Help: "The most bytes of bucket state held before buckets are evicted (--max-memory)."},
			func() float64 { return float64(s.MaxBytes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "bucket_evictions_total", Help: "Buckets not yet at rest evicted to keep the store within its bounds."},
			func() float64 { return float64(s.Evictions()) }),
	}
}

// PolicyLoaded records the first load of policy p, at time at: it sets the
// last-success time and the last-reload-successful gauge, counts no
// reload, and creates the per-rule series of p's rules at 0 (but those of
// detailed_metric rules, which exist per request value), so that they are
// there before the first hit — of at most MaxPrecreatedRules rules (which
// ones is unspecified); the series of the others appear at their first
// hit.
func (m *Metrics) PolicyLoaded(p *config.Policy, at time.Time) {
	m.loads.Add(1)
	m.lastReload.Set(float64(at.UnixNano()) / 1e9)
	m.lastReloadOK.Set(1)
	n := 0
	for l := range plainRules(p) {
		if n == MaxPrecreatedRules {
			break
		}
		m.counters(l.domain, l.rule, "")
		n++
	}
}

// MaxPrecreatedRules bounds the rules whose series PolicyLoaded creates
// before their first hit: a rule's nine series hold about 5 KB, so a
// policy of 100,000 rules (--max-policy-descriptors' default) would
// otherwise cost 500 MB, and seconds, as it is put in force.
const MaxPrecreatedRules = 10_000

// ruleLabels are the domain and rule labels of a rule's series.
type ruleLabels struct{ domain, rule string }

// seriesLabels are the labels of one per-rule series.
type seriesLabels struct{ domain, rule, descriptor string }

// plainRules returns the labels of p's rules that are not detailed_metric.
func plainRules(p *config.Policy) map[ruleLabels]struct{} {
	rules := map[ruleLabels]struct{}{}
	var walk func(domain string, descriptors []config.DescriptorView)
	walk = func(domain string, descriptors []config.DescriptorView) {
		for _, dv := range descriptors {
			if dv.StatKey != "" && !dv.DetailedMetric {
				rules[ruleLabels{domain, strings.TrimPrefix(dv.StatKey, domain+".")}] = struct{}{}
			}
			walk(domain, dv.Descriptors)
		}
	}
	for _, d := range p.View().Domains {
		walk(d.Domain, d.Descriptors)
	}
	return rules
}

// PolicyReloaded records a reload at time at that failed with err, or that
// put policy p in force when err is nil. After a success the rules of the
// previous policy are forgotten; the series of every rule p no longer has,
// and every detailed_metric series, are dropped; and p's series are created
// as PolicyLoaded does. A rule p keeps (the same domain and descriptor
// path, not detailed_metric) counts on in its series.
func (m *Metrics) PolicyReloaded(p *config.Policy, at time.Time, err error) {
	if err != nil {
		m.loadErrors.Add(1)
		m.reloads.WithLabelValues("failure").Inc()
		m.lastReloadOK.Set(0)
		return
	}
	keep := plainRules(p)
	m.mu.Lock()
	m.rules.Store(new(sync.Map))
	m.inFlight.Reset()
	m.inFlightLimit.Reset()
	for l := range m.series {
		if _, ok := keep[ruleLabels{l.domain, l.rule}]; ok && l.descriptor == "" {
			continue
		}
		for _, v := range m.ruleVecs() {
			v.DeleteLabelValues(l.domain, l.rule, l.descriptor)
		}
		delete(m.series, l)
	}
	m.mu.Unlock()
	m.reloads.WithLabelValues("success").Inc()
	m.PolicyLoaded(p, at)
}

// ruleVecs returns every per-rule counter: first the five that
// envoyproxy/ratelimit has too (upstreamRuleNames, in its order), then
// ratelimitd's own.
func (m *Metrics) ruleVecs() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.hits, m.within, m.near, m.over, m.shadow, m.overdraft, m.refunded, m.checks, m.checksOver}
}

// CertificateLoaded records a load of the gRPC server's certificate: the
// first (reload false), or a reload that failed with err or succeeded. The
// certificate in use expires at notAfter.
func (m *Metrics) CertificateLoaded(reload bool, notAfter time.Time, err error) {
	m.tlsOnce.Do(func() { // a daemon without TLS does not export these
		m.tlsReloads.WithLabelValues("success")
		m.tlsReloads.WithLabelValues("failure")
		m.reg.MustRegister(m.tlsReloads, m.certExpiry)
	})
	switch {
	case reload && err != nil:
		m.tlsReloads.WithLabelValues("failure").Inc()
	case reload:
		m.tlsReloads.WithLabelValues("success").Inc()
	}
	if err == nil {
		m.certExpiry.Set(float64(notAfter.Unix()))
	}
}

// Observe counts one decided request; it is the engine's Observer
// (engine.WithObserver(m.Observe)). It allocates nothing for requests
// whose rules have been seen before, except for detailed_metric rules.
func (m *Metrics) Observe(_ context.Context, req *engine.Request, resp *engine.Response, took time.Duration) {
	m.latency.Observe(took.Seconds())
	charged := resp.Code == algorithms.Allowed
	if charged {
		m.allowed.Inc()
	} else {
		m.denied.Inc()
	}
	var rules *sync.Map
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Rule == nil || st.Limit == nil || st.Cost == 0 && st.Kind != algorithms.Check {
			continue // no rule, every limit replaced, or a peek
		}
		if rules == nil {
			rules = m.rules.Load()
		}
		c := m.ruleCounters(rules, req.Domain, st.Rule)
		if st.Rule.DetailedMetric {
			c = m.detailedCounters(c, req.Descriptors[i].Entries)
		}
		if st.Limit.Rate.Algorithm() == algorithms.Concurrency && !st.Limit.Unlimited && !st.Limit.DenyAll {
			c.setInFlight(st)
		}
		cost := float64(st.Cost)
		switch st.Kind {
		case algorithms.Check:
			c.checks.Inc()
			if st.Code != algorithms.Allowed {
				c.checksOver.Inc()
			}
			continue
		case algorithms.Refund:
			c.refunded.Add(cost)
			continue
		case algorithms.Overdraft:
			c.overdraft.Add(cost)
		}
		c.hits.Add(cost)
		if st.Code == algorithms.Allowed {
			c.within.Add(cost)
			if n := nearHits(st, charged, m.nearRatio); n > 0 {
				c.near.Add(float64(n))
			}
			continue
		}
		c.over.Add(cost)
		if st.Shadow || resp.Shadowed {
			c.shadow.Add(cost)
		}
	}
}

// nearHits returns how many of a status's hits were charged beyond the
// near-limit threshold (see the package documentation).
func nearHits(st *engine.Status, charged bool, ratio float64) int64 {
	l := st.Limit
	if !charged || l == nil || l.Unlimited || l.DenyAll {
		return 0
	}
	capacity := l.Rate.Capacity()
	threshold := int64(math.Floor(float64(capacity) * ratio))
	used := capacity - st.Remaining
	if used <= threshold {
		return 0
	}
	return min(st.Cost, used-threshold)
}

// setInFlight sets the in-flight gauges of c's series from st, a status
// decided by a concurrency: st reports its bucket as the request left it.
func (c *ruleCounters) setInFlight(st *engine.Status) {
	g := c.gauges.Load()
	if g == nil {
		g = &inFlightGauges{
			inFlight: c.m.inFlight.WithLabelValues(c.domain, c.rule, c.descriptor),
			limit:    c.m.inFlightLimit.WithLabelValues(c.domain, c.rule, c.descriptor),
		}
		c.gauges.Store(g)
	}
	limit := st.Limit.Rate.Capacity()
	g.inFlight.Set(float64(limit - min(max(st.Remaining, 0), limit)))
	g.limit.Set(float64(limit))
}

// inFlightGauges are a concurrency rule's in-flight series.
type inFlightGauges struct{ inFlight, limit prometheus.Gauge }

// ruleCounters are one series of each per-rule counter.
type ruleCounters struct {
	hits, within, near, over, shadow        prometheus.Counter
	overdraft, refunded, checks, checksOver prometheus.Counter
	// gauges, for a rule decided by a concurrency, are its in-flight
	// series, created at its first such decision.
	gauges     atomic.Pointer[inFlightGauges]
	m          *Metrics
	descriptor string

	domain, rule string

	// For a detailed_metric rule: its series by descriptor label, how
	// many there are (at most Metrics.maxDetailed), and the overflow
	// series once the cap is reached, so that a flood of new values past
	// the cap takes no lock. mu guards n and the creation of series.
	detailed sync.Map // descriptor label -> *ruleCounters
	mu       sync.Mutex
	n        int
	overflow atomic.Pointer[ruleCounters]
}

// counters creates (or finds) the series of one rule and descriptor label.
func (m *Metrics) counters(domain, rule, descriptor string) *ruleCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.series[seriesLabels{domain, rule, descriptor}] = struct{}{}
	return &ruleCounters{
		hits:       m.hits.WithLabelValues(domain, rule, descriptor),
		within:     m.within.WithLabelValues(domain, rule, descriptor),
		near:       m.near.WithLabelValues(domain, rule, descriptor),
		over:       m.over.WithLabelValues(domain, rule, descriptor),
		shadow:     m.shadow.WithLabelValues(domain, rule, descriptor),
		overdraft:  m.overdraft.WithLabelValues(domain, rule, descriptor),
		refunded:   m.refunded.WithLabelValues(domain, rule, descriptor),
		checks:     m.checks.WithLabelValues(domain, rule, descriptor),
		checksOver: m.checksOver.WithLabelValues(domain, rule, descriptor),
		domain:     domain, rule: rule, descriptor: descriptor, m: m,
	}
}

// ruleCounters returns the series of rule r, resolving them on the rule's
// first use under the current policy.
func (m *Metrics) ruleCounters(rules *sync.Map, domain string, r *config.Rule) *ruleCounters {
	if c, ok := rules.Load(r); ok {
		return c.(*ruleCounters)
	}
	name := strings.TrimPrefix(r.StatKey, domain+".")
	c := &ruleCounters{domain: domain, rule: name}
	if !r.DetailedMetric { // a detailed rule counts per descriptor only
		c = m.counters(domain, name, "")
	}
	v, _ := rules.LoadOrStore(r, c)
	return v.(*ruleCounters)
}

// detailedCounters returns the series of a detailed_metric rule for the
// request's entries.
func (m *Metrics) detailedCounters(c *ruleCounters, entries []config.Entry) *ruleCounters {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
	}
	descriptor := b.String()
	if d, ok := c.detailed.Load(descriptor); ok {
		return d.(*ruleCounters)
	}
	if o := c.overflow.Load(); o != nil {
		return o
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.detailed.Load(descriptor); ok {
		return d.(*ruleCounters)
	}
	if o := c.overflow.Load(); o != nil {
		return o
	}
	if c.n >= m.maxDetailed {
		o := m.counters(c.domain, c.rule, OverflowDescriptor)
		c.overflow.Store(o)
		return o
	}
	d := m.counters(c.domain, c.rule, descriptor)
	c.detailed.Store(descriptor, d)
	c.n++
	return d
}
