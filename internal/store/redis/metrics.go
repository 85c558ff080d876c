package redis

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the store's Prometheus metrics, read at each scrape:
//
//	ratelimitd_redis_up                        1 while the last exchange with Redis succeeded, else 0
//	ratelimitd_redis_requests_total            requests that asked Redis
//	ratelimitd_redis_round_trips_total         round trips those made (at most one per request and node;
//	                                           batched requests share one)
//	ratelimitd_redis_batch_size                histogram: requests sent together in one batch
//	ratelimitd_redis_bucket_operations_total   charges the script decided, by path: "fast" (plain numbers)
//	                                           or "bignum"
//	ratelimitd_redis_fallback_decisions_total  requests Redis failed or answered too late, or that the open
//	                                           breaker kept from it, decided (wholly, or for a failed node's
//	                                           slots) by the failure mode instead
//	ratelimitd_redis_breaker_state             the circuit breaker: 0 closed, 1 open, 2 half open
//	ratelimitd_redis_breaker_transitions_total transitions of the breaker, by the state entered ("to")
//	ratelimitd_redis_breaker_open_decisions_total requests decided by the failure mode at once, the breaker
//	                                           being open
//	ratelimitd_redis_deny_cache_hits_total     requests denied from the local deny cache, without Redis
//	ratelimitd_redis_deny_cache_entries        buckets the deny cache remembers
//	ratelimitd_redis_undone_shares_total       slots' charges undone because another slot denied or failed
//
// and, as a constant label on ratelimitd_redis_up, failure_mode ("open"
// or "closed").
func (s *Store) Collectors() []prometheus.Collector {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "ratelimitd", Subsystem: "redis", Name: name, Help: help}
	}
	counter := func(name, help string, v func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts(opts(name, help)), func() float64 { return float64(v()) })
	}
	labeled := func(name, help, label, value string, v func() uint64) prometheus.Collector {
		o := opts(name, help)
		o.ConstLabels = prometheus.Labels{label: value}
		return prometheus.NewCounterFunc(prometheus.CounterOpts(o), func() float64 { return float64(v()) })
	}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ratelimitd", Subsystem: "redis", Name: "up",
			Help:        "1 while the last exchange with Redis succeeded, 0 while requests are decided by the failure mode.",
			ConstLabels: prometheus.Labels{"failure_mode": s.mode.String()}},
			func() float64 {
				if s.up.Load() {
					return 1
				}
				return 0
			}),
		counter("requests_total", "Requests that asked Redis.", s.stats.applies.Load),
		counter("round_trips_total", "Round trips to Redis nodes made by requests (batched requests share one).", s.stats.roundTrips.Load),
		s.metrics.batchSize,
		labeled("bucket_operations_total", "Charges decided by the script in Redis, by the path it took.", "path", "fast", s.stats.fast.Load),
		labeled("bucket_operations_total", "Charges decided by the script in Redis, by the path it took.", "path", "bignum", s.stats.bignum.Load),
		counter("fallback_decisions_total", "Requests that Redis failed or answered after the timeout, or that the open circuit breaker kept from it, decided (wholly, or for a failed node's slots) by the failure mode.", s.stats.fallbacks.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("breaker_state", "The circuit breaker's state: 0 closed, 1 open, 2 half open.")),
			func() float64 { return float64(s.breaker.State()) }),
		counter("breaker_open_decisions_total", "Requests decided by the failure mode at once, without asking Redis, while the circuit breaker was open.", s.stats.open.Load),
		counter("deny_cache_hits_total", "Requests denied from the local deny cache without asking Redis.", s.stats.cacheHits.Load),
		counter("undone_shares_total", "Slots' charges undone because another slot of the request denied it or failed.", s.stats.undos.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ratelimitd", Subsystem: "redis", Name: "deny_cache_entries",
			Help: "Buckets the local deny cache remembers as over their limit."},
			func() float64 {
				if s.cache == nil {
					return 0
				}
				return float64(s.cache.len())
			}),
	}
	for _, st := range []BreakerState{BreakerClosed, BreakerOpen, BreakerHalfOpen} {
		cs = append(cs, labeled("breaker_transitions_total", "Transitions of the circuit breaker, by the state entered.", "to", st.String(), s.breaker.transitions[st].Load))
	}
	return cs
}

// histograms are the store's distributions, observed as they happen.
type histograms struct {
	batchSize prometheus.Histogram // requests per batch a sender sends
}

func newHistograms() histograms {
	return histograms{
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "ratelimitd", Subsystem: "redis", Name: "batch_size",
			Help:    "Requests sent to Redis together in one batch (one round trip per node).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
	}
}
