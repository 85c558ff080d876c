package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// dashboardQueries returns every PromQL expression of the Grafana
// dashboard in deploy/grafana: its panels' targets and its variables'
// queries.
func dashboardQueries(t *testing.T) []string {
	b, err := os.ReadFile("../../deploy/grafana/ratelimitd.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Type, Query string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			exprs = append(exprs, v.Query)
		}
	}
	return exprs
}

var (
	metricName = regexp.MustCompile(`\bratelimitd_[a-z0-9_]+`)
	byClause   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	selector   = regexp.MustCompile(`\{([^}]*)\}`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
	labelName  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

// exposedLabels reads a /metrics page: each sample name with the label
// names its samples carry.
func exposedLabels(page string, into map[string]map[string]bool) {
	for _, line := range strings.Split(page, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if into[m[1]] == nil {
			into[m[1]] = map[string]bool{}
		}
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			into[m[1]][l[1]] = true
		}
	}
}

// targetLabels are those Prometheus adds when it scrapes: on no /metrics
// page.
var targetLabels = map[string]bool{"instance": true, "job": true}

// TestDashboardMetricsExist: every metric the Grafana dashboard queries is
// on the /metrics page of a running daemon — the memory store's with an
// authorization policy or with a concurrency, or the Redis store's — and every label it selects
// or groups by is on one of the metrics of that query.
func TestDashboardMetricsExist(t *testing.T) {
	memory := startBillingWithAuthz(t)
	srv := redistest.Start(t)
	redis := daemontest.Start(t, billingDomain, withRedis(srv.Addr(), guard.FailOpen))
	if _, err := rl.NewRateLimitServiceClient(redis.Dial(t)).ShouldRateLimit(context.Background(), req("billing", desc("user", "ann"))); err != nil {
		t.Fatal(err)
	}

	// A concurrency rule's gauges appear at its first decision.
	concurrency := daemontest.Start(t, concurrencyDomain)
	if _, err := rl.NewRateLimitServiceClient(concurrency.Dial(t)).ShouldRateLimit(context.Background(), req("llm", desc("tenant", "acme"))); err != nil {
		t.Fatal(err)
	}

	exposed := map[string]map[string]bool{}
	for _, d := range []*daemontest.Daemon{memory, redis, concurrency} {
		code, page := d.Get(t, "/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		exposedLabels(page, exposed)
	}
	exprs := dashboardQueries(t)
	if len(exprs) < 20 {
		t.Fatalf("%d queries in the dashboard; the file lost its panels?", len(exprs))
	}
	for _, e := range exprs {
		names := metricName.FindAllString(e, -1)
		if len(names) == 0 {
			t.Errorf("query %q names no ratelimitd metric", e)
		}
		labels := map[string]bool{}
		for _, m := range byClause.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(m[1], ",") {
				labels[strings.TrimSpace(l)] = true
			}
		}
		for _, m := range selector.FindAllStringSubmatch(e, -1) {
			for _, l := range matcher.FindAllStringSubmatch(m[1], -1) {
				labels[l[1]] = true
			}
		}
		for _, n := range names {
			if exposed[n] == nil {
				t.Errorf("query %q: no %s on /metrics", e, n)
			}
		}
		for l := range labels {
			if targetLabels[l] {
				continue
			}
			found := false
			for _, n := range names {
				found = found || exposed[n][l]
			}
			if !found {
				t.Errorf("query %q: label %q on none of %v", e, l, names)
			}
		}
	}
}
