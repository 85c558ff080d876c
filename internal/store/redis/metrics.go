package redis

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the store's Prometheus metrics, read at each scrape:
//
//	ratelimitd_redis_requests_total            requests that asked Redis
//	ratelimitd_redis_round_trips_total         round trips those made (at most one per request and node;
//	                                           batched requests share one)
//	ratelimitd_redis_batch_size                histogram: requests sent together in one batch
//	ratelimitd_redis_bucket_operations_total   charges the script decided, by path: "fast" (plain numbers)
//	                                           or "bignum"
//	ratelimitd_redis_undone_shares_total       slots' charges undone because another slot denied or failed
//
// The guard around the store (internal/store/guard, named "redis") adds
// the rest under ratelimitd_redis_: up, the fallback decisions, the
// breaker and the deny cache.
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
	return []prometheus.Collector{
		counter("requests_total", "Requests that asked Redis.", s.stats.applies.Load),
		counter("round_trips_total", "Round trips to Redis nodes made by requests (batched requests share one).", s.stats.roundTrips.Load),
		s.metrics.batchSize,
		labeled("bucket_operations_total", "Charges decided by the script in Redis, by the path it took.", "path", "fast", s.stats.fast.Load),
		labeled("bucket_operations_total", "Charges decided by the script in Redis, by the path it took.", "path", "bignum", s.stats.bignum.Load),
		counter("undone_shares_total", "Slots' charges undone because another slot of the request denied it or failed.", s.stats.undos.Load),
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
