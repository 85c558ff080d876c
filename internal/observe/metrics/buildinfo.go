package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo"
)

// buildInfo is ratelimitd_build_info: a gauge that is always 1, whose
// labels say which build is running (buildinfo.Info): version, revision
// (the commit), build_date (the commit's time, RFC 3339) and goversion,
// each "unknown" when the binary does not record it. Join on it to label
// other series by version:
//
//	ratelimitd_decisions_total * on(instance) group_left(version) ratelimitd_build_info
func buildInfo(i buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "Always 1; the labels name the running build: module version, commit, commit time and Go version.",
	}, []string{"version", "revision", "build_date", "goversion"})
	g.WithLabelValues(i.Version, i.Commit, i.Date(), i.GoVersion).Set(1)
	return g
}
