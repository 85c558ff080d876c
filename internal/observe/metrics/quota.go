package metrics

import "github.com/prometheus/client_golang/prometheus"

// Quota counts what the quota service does: the streams of Envoy's RLQS
// (internal/api/rlqsapi), and the rest as the service's observer
// (internal/engine/quotaservice.Observer):
//
//	ratelimitd_quota_streams                         quota streams open now
//	ratelimitd_quota_reports_total{domain}           bucket usage reports received
//	ratelimitd_quota_assignments_total{domain,action} bucket actions sent: "share" (a token bucket), "allow_all", "deny_all", "abandon"
//	ratelimitd_quota_refused_total{domain}           buckets answered DENY_ALL because a bound on buckets served by quota was reached
//	ratelimitd_quota_ledger_claims_total{result}     buckets synced with the ledger of shares (several daemons on one Redis): "ok", "error"
//
// domain is the report's domain when the policy has it, "" otherwise, so
// that callers cannot make series. A nil *Quota counts nothing.
type Quota struct {
	streams     prometheus.Gauge
	reports     *prometheus.CounterVec
	assignments *prometheus.CounterVec
	refused     *prometheus.CounterVec
	claims      *prometheus.CounterVec
}

// NewQuota adds the quota service's metrics to the registry. Call it once.
func (m *Metrics) NewQuota() *Quota {
	q := &Quota{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "quota", Name: "streams",
			Help: "Rate limit quota (RLQS) streams open now.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "quota", Name: "reports_total",
			Help: "Bucket usage reports received on RLQS streams, by domain (empty when the policy has no such domain).",
		}, []string{"domain"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "quota", Name: "assignments_total",
			Help: `Bucket actions sent on RLQS streams, by domain and action: "share" (a token bucket), "allow_all", "deny_all" or "abandon".`,
		}, []string{"domain", "action"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "quota", Name: "refused_total",
			Help: "Bucket reports answered DENY_ALL because a bound on the buckets served by quota (per stream, per tenant, in all) was reached, by domain.",
		}, []string{"domain"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "quota", Name: "ledger_claims_total",
			Help: `Buckets' claims synced with the ledger of shares that daemons on one Redis keep, by result: "ok" or "error".`,
		}, []string{"result"}),
	}
	m.reg.MustRegister(q.streams, q.reports, q.assignments, q.refused, q.claims)
	return q
}

// StreamOpened counts a stream open; StreamClosed, one closed.
func (q *Quota) StreamOpened() {
	if q != nil {
		q.streams.Inc()
	}
}

// StreamClosed counts a stream closed.
func (q *Quota) StreamClosed() {
	if q != nil {
		q.streams.Dec()
	}
}

// Reported counts a bucket's usage report in domain.
func (q *Quota) Reported(domain string) {
	if q != nil {
		q.reports.WithLabelValues(domain).Inc()
	}
}

// Assigned counts an action sent for a bucket of domain.
func (q *Quota) Assigned(domain, action string) {
	if q != nil {
		q.assignments.WithLabelValues(domain, action).Inc()
	}
}

// Refused counts a bucket of domain answered DENY_ALL at a bound.
func (q *Quota) Refused(domain string) {
	if q != nil {
		q.refused.WithLabelValues(domain).Inc()
	}
}

// Synced counts n claims sent to the ledger, answered unless err.
func (q *Quota) Synced(n int, err error) {
	if q != nil {
		result := "ok"
		if err != nil {
			result = "error"
		}
		q.claims.WithLabelValues(result).Add(float64(n))
	}
}
