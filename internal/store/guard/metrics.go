package guard

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the Guard's Prometheus metrics, read at each scrape,
// under ratelimitd_<Config.Name>_:
//
//	up                           1 while the last exchange with the remote succeeded, else 0
//	fallback_decisions_total     requests the remote failed, or that the open breaker kept from it,
//	                             decided (wholly, or for a failed part) by the failure mode instead
//	breaker_state                the circuit breaker: 0 closed, 1 open, 2 half open
//	breaker_transitions_total    transitions of the breaker, by the state entered ("to")
//	breaker_open_decisions_total requests decided by the failure mode at once, the breaker being open
//	deny_cache_hits_total        requests denied from the local deny cache, without the remote
//	deny_cache_entries           buckets the deny cache remembers
//
// and, as a constant label on up, failure_mode ("open" or "closed").
func (g *Guard) Collectors() []prometheus.Collector {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "ratelimitd", Subsystem: g.name, Name: name, Help: help}
	}
	counter := func(name, help string, v func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts(opts(name, help)), func() float64 { return float64(v()) })
	}
	gauge := func(o prometheus.Opts, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts(o), v)
	}
	up := opts("up", "1 while the last exchange with "+g.name+" succeeded, 0 while requests are decided by the failure mode.")
	up.ConstLabels = prometheus.Labels{"failure_mode": g.mode.String()}
	cs := []prometheus.Collector{
		gauge(up, func() float64 {
			if g.up.Load() {
				return 1
			}
			return 0
		}),
		counter("fallback_decisions_total", "Requests that "+g.name+" failed or answered after the timeout, or that the open circuit breaker kept from it, decided (wholly, or for a failed node's slots) by the failure mode.", g.fallbacks.Load),
		gauge(opts("breaker_state", "The circuit breaker's state: 0 closed, 1 open, 2 half open."),
			func() float64 { return float64(g.breaker.State()) }),
		counter("breaker_open_decisions_total", "Requests decided by the failure mode at once, without asking "+g.name+", while the circuit breaker was open.", g.open.Load),
		counter("deny_cache_hits_total", "Requests denied from the local deny cache without asking "+g.name+".", g.cacheHits.Load),
		gauge(opts("deny_cache_entries", "Buckets the local deny cache remembers as over their limit."),
			func() float64 {
				if g.cache == nil {
					return 0
				}
				return float64(g.cache.len())
			}),
	}
	for _, st := range []BreakerState{BreakerClosed, BreakerOpen, BreakerHalfOpen} {
		o := opts("breaker_transitions_total", "Transitions of the circuit breaker, by the state entered.")
		o.ConstLabels = prometheus.Labels{"to": st.String()}
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts(o), func() float64 { return float64(g.breaker.transitions[st].Load()) }))
	}
	return cs
}
