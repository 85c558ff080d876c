package metrics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics/metricstest"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

const t0 = int64(1_700_000_040) * int64(time.Second)

const policy = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: heavy
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: narrow
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /orders
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: svc
    rate_limit: {unit: minute, requests_per_unit: 10, name: svc}
  - key: vip
    rate_limit: {unit: minute, requests_per_unit: 100, name: vip, replaces: [{name: svc}]}
`

// scrape returns every sample of the exposition, keyed by its series as
// written ("name{label="value",...}").
func scrape(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return metricstest.Samples(t, rec.Body)
}

// rule returns the series names of one rule's counters.
func rule(name, r, descriptor string) string {
	return `ratelimitd_rule_` + name + `{descriptor="` + descriptor + `",domain="d",rule="` + r + `"}`
}

type call struct {
	descriptors [][]string // each: key, value, key, value…
	hits        uint64     // request hits (0 means 1)
	times       int
}

func send(t *testing.T, e *engine.Engine, calls []call) {
	t.Helper()
	for _, c := range calls {
		req := &engine.Request{Domain: "d", Hits: c.hits}
		for _, kv := range c.descriptors {
			var d engine.Descriptor
			for i := 0; i+1 < len(kv); i += 2 {
				d.Entries = append(d.Entries, config.Entry{Key: kv[i], Value: kv[i+1]})
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		for range max(c.times, 1) {
			var resp engine.Response
			if err := e.ShouldRateLimit(context.Background(), req, &resp); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func newEngine(t *testing.T, m *metrics.Metrics, extra ...engine.Option) *engine.Engine {
	t.Helper()
	p, err := config.Parse("d.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return engine.New(p, memory.New(clock.NewFake(t0)), append([]engine.Option{engine.WithObserver(m.Observe)}, extra...)...)
}

func TestRuleCounters(t *testing.T) {
	m := metrics.New()
	e := newEngine(t, m)
	peek := uint64(0)
	send(t, e, []call{
		{descriptors: [][]string{{"k", "a"}}, times: 11},                          // 10 admitted, the 9th and 10th near, 1 over
		{descriptors: [][]string{{"heavy", "a"}}, hits: 5, times: 2},              // 5 then 10 used: 2 of the second 5 near
		{descriptors: [][]string{{"heavy", "a"}}, hits: 5},                        // over: 5 hits
		{descriptors: [][]string{{"wide", "a"}, {"narrow", "a"}}, times: 2},       // the second is denied by narrow
		{descriptors: [][]string{{"shadowed", "a"}}, times: 2},                    // the second would be denied
		{descriptors: [][]string{{"path", "/orders", "user", "alice"}}, times: 3}, // detailed: per user
		{descriptors: [][]string{{"path", "/orders", "user", "bob"}}},             //
		{descriptors: [][]string{{"free", "a"}}, times: 3},                        // unlimited: never near
		{descriptors: [][]string{{"nothing", "a"}}},                               // unmatched
		{descriptors: [][]string{{"path", "/orders"}}},                            // shallower than the rule: unmatched
		{descriptors: [][]string{{"svc", "a"}, {"vip", "b"}}},                     // svc's limit replaced by vip's
	})
	var r engine.Response
	e.ShouldRateLimit(context.Background(), &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{
		{Entries: []config.Entry{{Key: "k", Value: "a"}}, Hits: &peek}}}, &r) // a peek counts no hit

	want := map[string]float64{
		rule("hits_total", "k", ""):              11,
		rule("within_limit_hits_total", "k", ""): 10,
		rule("near_limit_hits_total", "k", ""):   2,
		rule("over_limit_hits_total", "k", ""):   1,
		rule("shadow_mode_hits_total", "k", ""):  0,

		rule("hits_total", "heavy", ""):              15,
		rule("within_limit_hits_total", "heavy", ""): 10,
		rule("near_limit_hits_total", "heavy", ""):   2,
		rule("over_limit_hits_total", "heavy", ""):   5,

		// wide admitted both times; the second request was denied by
		// narrow, so wide was charged once: 1 of 5 used, never near.
		rule("hits_total", "wide", ""):                2,
		rule("within_limit_hits_total", "wide", ""):   2,
		rule("near_limit_hits_total", "wide", ""):     0,
		rule("over_limit_hits_total", "wide", ""):     0,
		rule("hits_total", "narrow", ""):              2,
		rule("within_limit_hits_total", "narrow", ""): 1,
		rule("near_limit_hits_total", "narrow", ""):   1, // 1 of 1 is beyond floor(0.8)
		rule("over_limit_hits_total", "narrow", ""):   1,

		rule("hits_total", "shadowed", ""):              2,
		rule("within_limit_hits_total", "shadowed", ""): 1,
		rule("over_limit_hits_total", "shadowed", ""):   1,
		rule("shadow_mode_hits_total", "shadowed", ""):  1,

		rule("hits_total", "path_/orders.user", "path_/orders.user_alice"):              3,
		rule("within_limit_hits_total", "path_/orders.user", "path_/orders.user_alice"): 2,
		rule("near_limit_hits_total", "path_/orders.user", "path_/orders.user_alice"):   1,
		rule("over_limit_hits_total", "path_/orders.user", "path_/orders.user_alice"):   1,
		rule("hits_total", "path_/orders.user", "path_/orders.user_bob"):                1,
		rule("near_limit_hits_total", "path_/orders.user", "path_/orders.user_bob"):     0,

		rule("hits_total", "free", ""):              3,
		rule("within_limit_hits_total", "free", ""): 3,
		rule("near_limit_hits_total", "free", ""):   0,

		rule("hits_total", "svc", ""): 0, // replaced: counts nothing
		rule("hits_total", "vip", ""): 1,

		`ratelimitd_decisions_total{code="ok"}`:         10 + 2 + 1 + 2 + 2 + 1 + 3 + 1 + 1 + 1 + 1, // the peek last
		`ratelimitd_decisions_total{code="over_limit"}`: 1 + 1 + 1 + 1,
		`ratelimitd_decision_duration_seconds_count`:    29,
	}
	got := scrape(t, m)
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	// A detailed rule has no series without a descriptor; an unmatched
	// descriptor has none at all.
	for series := range got {
		if strings.Contains(series, `rule="path_/orders.user"`) && strings.Contains(series, `descriptor=""`) ||
			strings.Contains(series, `rule="nothing"`) {
			t.Errorf("unexpected series %s", series)
		}
	}
}

func TestNearLimitRatio(t *testing.T) {
	tests := []struct {
		ratio    float64
		wantNear float64
	}{
		{0.8, 2}, // threshold 8: hits 9 and 10
		{0.5, 5}, // threshold 5: hits 6 to 10
		{1, 0},   // threshold 10: never
		{0.05, 10},
	}
	for _, tt := range tests {
		t.Run(strconv.FormatFloat(tt.ratio, 'g', -1, 64), func(t *testing.T) {
			m := metrics.New(metrics.WithNearLimitRatio(tt.ratio))
			send(t, newEngine(t, m), []call{{descriptors: [][]string{{"k", "a"}}, times: 12}})
			if got := scrape(t, m)[rule("near_limit_hits_total", "k", "")]; got != tt.wantNear {
				t.Errorf("near-limit hits %v, want %v", got, tt.wantNear)
			}
		})
	}
}

// TestGlobalShadowMode: what the engine let through in global shadow mode
// is counted as over limit and shadow mode.
func TestGlobalShadowMode(t *testing.T) {
	m := metrics.New()
	send(t, newEngine(t, m, engine.WithShadowMode(true)), []call{{descriptors: [][]string{{"narrow", "a"}}, times: 3}})
	got := scrape(t, m)
	if got[rule("over_limit_hits_total", "narrow", "")] != 2 || got[rule("shadow_mode_hits_total", "narrow", "")] != 2 ||
		got[`ratelimitd_decisions_total{code="ok"}`] != 3 {
		t.Errorf("got over %v shadow %v ok %v, want 2 2 3", got[rule("over_limit_hits_total", "narrow", "")],
			got[rule("shadow_mode_hits_total", "narrow", "")], got[`ratelimitd_decisions_total{code="ok"}`])
	}
}

// TestReloadKeepsSeries: after a reload, an unchanged rule counts on in
// the same series.
func TestReloadKeepsSeries(t *testing.T) {
	m := metrics.New()
	e := newEngine(t, m)
	send(t, e, []call{{descriptors: [][]string{{"k", "a"}}, times: 3}})
	p, _ := config.Parse("d.yaml", []byte(policy))
	e.SetPolicy(p)
	m.PolicyReloaded(p, time.Unix(1_800_000_000, 0), nil)
	send(t, e, []call{{descriptors: [][]string{{"k", "a"}}, times: 2}})
	if got := scrape(t, m)[rule("hits_total", "k", "")]; got != 5 {
		t.Errorf("hits %v, want 5", got)
	}
}

type fakeStore struct{}

func (fakeStore) Len() int          { return 42 }
func (fakeStore) MaxBuckets() int   { return 1000 }
func (fakeStore) Bytes() int64      { return 8400 }
func (fakeStore) MaxBytes() int64   { return 1 << 20 }
func (fakeStore) Evictions() uint64 { return 7 }

func TestOperationalMetrics(t *testing.T) {
	m := metrics.New()
	m.Registry().MustRegister(metrics.MemoryStoreCollectors(fakeStore{})...)
	m.PolicyLoaded(config.Default(), time.Unix(1_800_000_000, 0))
	want := map[string]float64{
		`ratelimitd_buckets`:                                      42,
		`ratelimitd_buckets_max`:                                  1000,
		`ratelimitd_bucket_bytes`:                                 8400,
		`ratelimitd_bucket_bytes_max`:                             1 << 20,
		`ratelimitd_bucket_evictions_total`:                       7,
		`ratelimitd_policy_reloads_total{result="success"}`:       0,
		`ratelimitd_policy_reloads_total{result="failure"}`:       0,
		`ratelimitd_policy_last_reload_success_timestamp_seconds`: 1.8e9,
		`ratelimitd_policy_last_reload_successful`:                1,
		// The policy's rules have series before their first hit.
		`ratelimitd_rule_hits_total{descriptor="",domain="default",rule="path.user"}`:                     0,
		`ratelimitd_rule_over_limit_hits_total{descriptor="",domain="default",rule="generic_key_global"}`: 0,
	}
	check := func(step string) {
		t.Helper()
		got := scrape(t, m)
		for series, v := range want {
			if g, ok := got[series]; !ok || g != v {
				t.Errorf("%s: %s = %v (present: %v), want %v", step, series, g, ok, v)
			}
		}
	}
	check("loaded")
	if _, ok := scrape(t, m)[`ratelimitd_tls_reloads_total{result="success"}`]; ok {
		t.Error("TLS metrics exported without TLS")
	}

	m.PolicyReloaded(nil, time.Unix(1_800_000_100, 0), errors.New("bad"))
	want[`ratelimitd_policy_reloads_total{result="failure"}`] = 1
	want[`ratelimitd_policy_last_reload_successful`] = 0
	check("failed reload")

	m.PolicyReloaded(config.Default(), time.Unix(1_800_000_200, 0), nil)
	want[`ratelimitd_policy_reloads_total{result="success"}`] = 1
	want[`ratelimitd_policy_last_reload_successful`] = 1
	want[`ratelimitd_policy_last_reload_success_timestamp_seconds`] = 1_800_000_200
	check("reload")

	m.CertificateLoaded(false, time.Unix(1_900_000_000, 0), nil)
	want[`ratelimitd_tls_reloads_total{result="success"}`] = 0
	want[`ratelimitd_tls_reloads_total{result="failure"}`] = 0
	want[`ratelimitd_tls_certificate_expiry_timestamp_seconds`] = 1.9e9
	check("certificate")
	m.CertificateLoaded(true, time.Time{}, errors.New("bad key"))
	m.CertificateLoaded(true, time.Unix(1_950_000_000, 0), nil)
	want[`ratelimitd_tls_reloads_total{result="success"}`] = 1
	want[`ratelimitd_tls_reloads_total{result="failure"}`] = 1
	want[`ratelimitd_tls_certificate_expiry_timestamp_seconds`] = 1.95e9
	check("certificate reloads")
}

// series returns the series of one counter whose rule label is r.
func series(got map[string]float64, counter, r string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		if strings.HasPrefix(k, "ratelimitd_rule_"+counter+"{") && strings.Contains(k, `rule="`+r+`"`) {
			out[k] = v
		}
	}
	return out
}

// TestDetailedSeriesCapped: a detailed_metric rule gets a series for each
// of its first values up to the cap; every further value counts on the
// overflow series, and a value that has its series keeps counting there.
func TestDetailedSeriesCapped(t *testing.T) {
	m := metrics.New(metrics.WithMaxDetailedSeries(3))
	e := newEngine(t, m)
	for i := range 10 {
		send(t, e, []call{{descriptors: [][]string{{"path", "/orders", "user", "u" + strconv.Itoa(i)}}}})
	}
	send(t, e, []call{{descriptors: [][]string{{"path", "/orders", "user", "u0"}}}})
	got := series(scrape(t, m), "hits_total", "path_/orders.user")
	want := map[string]float64{
		rule("hits_total", "path_/orders.user", "path_/orders.user_u0"):     2,
		rule("hits_total", "path_/orders.user", "path_/orders.user_u1"):     1,
		rule("hits_total", "path_/orders.user", "path_/orders.user_u2"):     1,
		rule("hits_total", "path_/orders.user", metrics.OverflowDescriptor): 7,
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestDetailedSeriesDefaultCap: with the default cap, a flood of distinct
// values makes at most DefaultMaxDetailedSeries+1 series per counter.
func TestDetailedSeriesDefaultCap(t *testing.T) {
	m := metrics.New()
	e := newEngine(t, m)
	const values = metrics.DefaultMaxDetailedSeries + 500
	for i := range values {
		send(t, e, []call{{descriptors: [][]string{{"path", "/orders", "user", "u" + strconv.Itoa(i)}}}})
	}
	got := series(scrape(t, m), "hits_total", "path_/orders.user")
	if len(got) != metrics.DefaultMaxDetailedSeries+1 {
		t.Errorf("%d series, want %d", len(got), metrics.DefaultMaxDetailedSeries+1)
	}
	if o := got[rule("hits_total", "path_/orders.user", metrics.OverflowDescriptor)]; o != 500 {
		t.Errorf("overflow %v hits, want 500", o)
	}
}

// TestReloadDropsSeries: a reload drops the series of rules the new policy
// no longer has and every detailed series (the cap counts again from
// zero), and keeps those of the rules it keeps.
func TestReloadDropsSeries(t *testing.T) {
	m := metrics.New(metrics.WithMaxDetailedSeries(2))
	e := newEngine(t, m)
	send(t, e, []call{
		{descriptors: [][]string{{"k", "a"}}, times: 3},
		{descriptors: [][]string{{"wide", "a"}}},
		{descriptors: [][]string{{"path", "/orders", "user", "alice"}}},
		{descriptors: [][]string{{"path", "/orders", "user", "bob"}}},
		{descriptors: [][]string{{"path", "/orders", "user", "carol"}}},
	})
	// k stays; wide goes; the detailed rule stays detailed.
	p, err := config.Parse("d.yaml", []byte(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /orders
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	e.SetPolicy(p)
	m.PolicyReloaded(p, time.Unix(1_800_000_000, 0), nil)
	got := scrape(t, m)
	if v, ok := got[rule("hits_total", "k", "")]; !ok || v != 3 {
		t.Errorf("kept rule k: %v (present %v), want 3", v, ok)
	}
	for _, r := range []string{"wide", "path_/orders.user"} {
		if s := series(got, "hits_total", r); len(s) > 0 {
			t.Errorf("rule %s: series after the reload: %v", r, s)
		}
	}
	send(t, e, []call{
		{descriptors: [][]string{{"path", "/orders", "user", "dave"}}},
		{descriptors: [][]string{{"path", "/orders", "user", "erin"}}},
		{descriptors: [][]string{{"path", "/orders", "user", "frank"}}},
	})
	got = series(scrape(t, m), "hits_total", "path_/orders.user")
	want := map[string]float64{
		rule("hits_total", "path_/orders.user", "path_/orders.user_dave"):   1,
		rule("hits_total", "path_/orders.user", "path_/orders.user_erin"):   1,
		rule("hits_total", "path_/orders.user", metrics.OverflowDescriptor): 1,
	}
	if len(got) != len(want) {
		t.Errorf("after the reload: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("after the reload: %s = %v, want %v", k, got[k], v)
		}
	}
}

// TestRuleTotals: a rule's totals are its series summed — a detailed rule's
// per-value series and its overflow series included — and agree with what
// /metrics shows.
func TestRuleTotals(t *testing.T) {
	m := metrics.New(metrics.WithMaxDetailedSeries(3))
	e := newEngine(t, m)
	for i := range 10 {
		send(t, e, []call{{descriptors: [][]string{{"path", "/orders", "user", "u" + strconv.Itoa(i)}}}})
	}
	totals := map[string]metrics.RuleTotal{}
	m.RuleTotals(func(rt metrics.RuleTotal) { totals[rt.Domain+"/"+rt.Rule] = rt })
	got := totals["d/path_/orders.user"]
	var scraped float64
	for _, v := range series(scrape(t, m), "within_limit_hits_total", "path_/orders.user") {
		scraped += v
	}
	if got.Within != 10 || got.Within != scraped || got.Over != 0 {
		t.Errorf("totals of the detailed rule: %+v (scraped within: %v); want 10 within, as scraped, over the 3 series and the overflow", got, scraped)
	}
}
