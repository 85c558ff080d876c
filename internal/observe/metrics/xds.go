package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
)

// RegisterXDS adds the metrics of the policy's xDS subscription, read from
// status at each scrape:
//
//	ratelimitd_xds_connected                      1 while the stream to the server is open
//	ratelimitd_xds_updates_total{result}          responses "applied" (ACK) and "refused" (NACK)
//	ratelimitd_xds_policy_info{server,node_id,version}  1, labelled with the version in force
//	ratelimitd_xds_last_nack_timestamp_seconds    when the last update was refused since the last applied one (0: none)
func (m *Metrics) RegisterXDS(status func() xdspolicy.Status) {
	m.reg.MustRegister(xdsCollector{status})
}

type xdsCollector struct{ status func() xdspolicy.Status }

var (
	xdsConnected = prometheus.NewDesc(namespace+"_xds_connected", "1 while the stream to the xDS server is open, 0 otherwise.", nil, nil)
	xdsUpdates   = prometheus.NewDesc(namespace+"_xds_updates_total", `xDS responses by result: "applied" (ACKed) or "refused" (NACKed; the policy in force stayed).`, []string{"result"}, nil)
	xdsInfo      = prometheus.NewDesc(namespace+"_xds_policy_info", "1, labelled with the xDS server, node id and the version of the policy in force (empty before the first).", []string{"server", "node_id", "version"}, nil)
	xdsLastNACK  = prometheus.NewDesc(namespace+"_xds_last_nack_timestamp_seconds", "When the last xDS update was refused, since the last one applied, in seconds since the Unix epoch; 0 when none was.", nil, nil)
)

func (c xdsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- xdsConnected
	ch <- xdsUpdates
	ch <- xdsInfo
	ch <- xdsLastNACK
}

func (c xdsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	connected, nack := 0.0, 0.0
	if s.Connected {
		connected = 1
	}
	if !s.LastNACKAt.IsZero() {
		nack = float64(s.LastNACKAt.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(xdsConnected, prometheus.GaugeValue, connected)
	ch <- prometheus.MustNewConstMetric(xdsUpdates, prometheus.CounterValue, float64(s.Applied), "applied")
	ch <- prometheus.MustNewConstMetric(xdsUpdates, prometheus.CounterValue, float64(s.Refused), "refused")
	ch <- prometheus.MustNewConstMetric(xdsInfo, prometheus.GaugeValue, 1, s.Server, s.NodeID, s.Version)
	ch <- prometheus.MustNewConstMetric(xdsLastNACK, prometheus.GaugeValue, nack)
}
