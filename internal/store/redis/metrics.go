package redis

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the store's Prometheus metrics, read at each scrape:
//
//	ratelimitd_redis_up                       1 while the last exchange with Redis succeeded, else 0
//	ratelimitd_redis_requests_total           requests that asked Redis
//	ratelimitd_redis_round_trips_total        round trips those made (one per request, one per node across slots)
//	ratelimitd_redis_fallback_decisions_total requests Redis failed or answered too late, decided (wholly, or
//	                                          for a failed node's slots) by the failure mode instead
//	ratelimitd_redis_deny_cache_hits_total    requests denied from the local deny cache, without Redis
//	ratelimitd_redis_deny_cache_entries       buckets the deny cache remembers
//	ratelimitd_redis_undone_shares_total      slots' charges undone because another slot denied or failed
//
// and, as a constant label on ratelimitd_redis_up, failure_mode ("open"
// or "closed").
func (s *Store) Collectors() []prometheus.Collector {
	counter := func(name, help string, v func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ratelimitd", Subsystem: "redis", Name: name, Help: help},
			func() float64 { return float64(v()) })
	}
	return []prometheus.Collector{
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
		counter("round_trips_total", "Round trips to Redis nodes made by requests.", s.stats.roundTrips.Load),
		counter("fallback_decisions_total", "Requests that Redis failed or answered after the timeout, decided (wholly, or for a failed node's slots) by the failure mode.", s.stats.fallbacks.Load),
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
