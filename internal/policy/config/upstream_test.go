package config

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// TestUpstreamFormat loads testdata/envoy, files in envoyproxy/ratelimit's
// format using every field upstream documents, and checks that requests
// match as upstream's README describes.
func TestUpstreamFormat(t *testing.T) {
	p, err := Load("testdata/envoy")
	if err != nil {
		t.Fatalf("Load:\n%v", err)
	}
	var names []string
	for _, d := range p.Domains() {
		names = append(names, d.Name)
	}
	if got, want := len(names), 5; got != want {
		t.Errorf("domains %v, want %d", names, want)
	}

	type want struct {
		statKey   string
		requests  int64
		unit      Unit
		unlimited bool
		shadow    bool
		detailed  bool
		name      string
		replaces  string
	}
	tests := []struct {
		name, domain, request string
		want                  *want // nil: no match
	}{
		// storage.yaml: every unit, as fixed windows of one unit.
		{"second", "storage", "bucket=photos", &want{statKey: "storage.bucket_photos", requests: 50, unit: UnitSecond}},
		{"minute", "storage", "bucket=videos", &want{statKey: "storage.bucket_videos", requests: 300, unit: UnitMinute}},
		{"hour", "storage", "bucket=backups", &want{statKey: "storage.bucket_backups", requests: 20, unit: UnitHour}},
		{"day", "storage", "bucket=archive", &want{statKey: "storage.bucket_archive", requests: 10, unit: UnitDay}},
		{"week, upper case", "storage", "bucket=reports", &want{statKey: "storage.bucket_reports", requests: 7, unit: UnitWeek}},
		{"month, mixed case", "storage", "bucket=invoices", &want{statKey: "storage.bucket_invoices", requests: 31, unit: UnitMonth}},
		{"year", "storage", "bucket=audit", &want{statKey: "storage.bucket_audit", requests: 4, unit: UnitYear}},
		{"numeric value is a string", "storage", "bucket=2024", &want{statKey: "storage.bucket_2024", requests: 1, unit: UnitSecond}},
		{"unlisted value", "storage", "bucket=music", nil},

		// notify.yaml: nested descriptors and key-only values.
		{"nested, any phone", "notify", "channel=sms,phone=2065550100", &want{statKey: "notify.channel_sms.phone", requests: 3, unit: UnitHour}},
		{"placeholder alone", "notify", "channel=sms", nil},
		{"other channel", "notify", "channel=email,phone=2065550100", nil},
		{"top-level key-only", "notify", "phone=2065550100", &want{statKey: "notify.phone", requests: 20, unit: UnitDay}},
		{"request deeper than the rule", "notify", "phone=2065550100,channel=sms", nil},

		// gateway.yaml: order, whitelisting, unlimited, shadow, detailed, wildcards.
		{"key-only per address", "gateway", "client_ip=198.51.100.4", &want{statKey: "gateway.client_ip", requests: 100, unit: UnitSecond, detailed: true}},
		{"value before key-only", "gateway", "client_ip=192.0.2.7", &want{statKey: "gateway.client_ip_192.0.2.7", requests: 5, unit: UnitSecond}},
		{"whitelisted address", "gateway", "client_ip=192.0.2.1", nil},
		{"unlimited", "gateway", "route=healthz", &want{statKey: "gateway.route_healthz", unlimited: true}},
		{"first wildcard", "gateway", "route=/v1/search?q=x", &want{statKey: "gateway.route_/v1/search*", requests: 60, unit: UnitMinute}},
		{"second wildcard", "gateway", "route=/v1/orders", &want{statKey: "gateway.route_/v1/*", requests: 600, unit: UnitMinute}},
		{"no wildcard matches", "gateway", "route=/v2/orders", nil},
		{"shadow mode on a nested wildcard", "gateway", "service=batch,team=data-eng", &want{statKey: "gateway.service_batch.team_data*", requests: 10, unit: UnitMinute, shadow: true}},
		{"not in shadow mode", "gateway", "service=batch,team=web", &want{statKey: "gateway.service_batch.team", requests: 30, unit: UnitMinute}},

		// billing.yaml: names and replaces.
		{"named limit", "billing", "customer=c1,plan=standard", &want{statKey: "billing.customer.plan_standard", requests: 100, unit: UnitMinute, name: "customer_standard"}},
		{"replacing limit", "billing", "endpoint=export,customer=c1", &want{statKey: "billing.endpoint_export.customer", requests: 12, unit: UnitHour, name: "export_per_customer", replaces: "customer_standard"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Domain(tt.domain)
			if d == nil {
				t.Fatalf("no domain %q", tt.domain)
			}
			r := d.Match(entries(tt.request))
			if tt.want == nil {
				if r != nil {
					t.Errorf("Match(%s) = %s, want no match", tt.request, r.StatKey)
				}
				return
			}
			if r == nil {
				t.Fatalf("Match(%s) = nil, want %s", tt.request, tt.want.statKey)
			}
			if len(r.Limits) != 1 {
				t.Fatalf("%d limits, want 1", len(r.Limits))
			}
			l := r.Limits[0]
			replaces := ""
			if len(l.Replaces) == 1 {
				replaces = l.Replaces[0]
			}
			got := want{
				statKey: r.StatKey, requests: l.Rate.Requests(), unit: l.Unit, unlimited: l.Unlimited,
				shadow: r.ShadowMode, detailed: r.DetailedMetric, name: l.Name, replaces: replaces,
			}
			if got != *tt.want || len(l.Replaces) > 1 {
				t.Errorf("Match(%s) =\n\t%+v\nwant\n\t%+v", tt.request, got, *tt.want)
			}
			if l.Unlimited {
				return
			}
			// Upstream's arithmetic: a fixed window of one unit.
			if l.Rate.Algorithm() != algorithms.FixedWindow || l.Rate.Period() != l.Unit.Duration() || l.UnitMultiplier != 1 || l.RetryJitter != 0 {
				t.Errorf("Rate %v %d per %v (multiplier %d, jitter %v), want fixed_window per %v",
					l.Rate.Algorithm(), l.Rate.Requests(), l.Rate.Period(), l.UnitMultiplier, l.RetryJitter, l.Unit.Duration())
			}
		})
	}
}

func TestUnit(t *testing.T) {
	tests := []struct {
		u    Unit
		name string
		d    time.Duration
	}{
		{UnitNone, "none", 0},
		{UnitSecond, "second", time.Second},
		{UnitMinute, "minute", time.Minute},
		{UnitHour, "hour", time.Hour},
		{UnitDay, "day", 24 * time.Hour},
		{UnitWeek, "week", 7 * 24 * time.Hour},
		{UnitMonth, "month", 30 * 24 * time.Hour},
		{UnitYear, "year", 365 * 24 * time.Hour},
		{Unit(99), "Unit(99)", 0},
	}
	for _, tt := range tests {
		if tt.u.String() != tt.name || tt.u.Duration() != tt.d {
			t.Errorf("Unit %d: %q %v, want %q %v", tt.u, tt.u.String(), tt.u.Duration(), tt.name, tt.d)
		}
		if tt.u != UnitNone && tt.d != 0 {
			if u, ok := parseUnit(tt.name); !ok || u != tt.u {
				t.Errorf("parseUnit(%q) = %v, %v", tt.name, u, ok)
			}
		}
	}
	if _, ok := parseUnit("none"); ok {
		t.Error(`parseUnit("none") succeeded`)
	}
}

func TestNewInlineLimit(t *testing.T) {
	l, err := NewInlineLimit("req", algorithms.TokenBucket, 600, time.Minute, 800)
	if err != nil {
		t.Fatal(err)
	}
	if l.Key != "inline:token_bucket/600/1m0s/800" || l.Name != "req" || l.Unit != UnitNone || l.UnitMultiplier != 0 || l.Rate.Capacity() != 800 {
		t.Errorf("NewInlineLimit = %+v", l)
	}
	// The same arithmetic in a policy file has a different Key.
	pl := Default().Domain("default").Match(entries("path=/a,user=b")).Limits[0]
	if pl.Key != "token_bucket/600/1m0s/800" || pl.Key == l.Key {
		t.Errorf("policy Key %q, inline Key %q", pl.Key, l.Key)
	}
	if _, err := NewInlineLimit("bad", algorithms.FixedWindow, 10, time.Second, 20); err == nil {
		t.Error("NewInlineLimit accepted a burst for fixed_window")
	}
	if _, err := NewInlineLimit("bad", algorithms.TokenBucket, 0, time.Second, 0); err == nil {
		t.Error("NewInlineLimit accepted 0 requests")
	}
}

// TestKeyStable: equal arithmetic gives equal Keys across parses, however
// it is written; different arithmetic gives different Keys.
func TestKeyStable(t *testing.T) {
	key := func(rl string) string {
		t.Helper()
		p := mustParse(t, "domain: d\ndescriptors: [{key: k, rate_limit: "+rl+"}]\n")
		return p.Domain("d").Match(entries("k=v")).Limits[0].Key
	}
	same := [][2]string{
		{"{unit: minute, requests_per_unit: 60}", "{unit: second, unit_multiplier: 60, requests_per_unit: 60, algorithm: fixed_window, name: x}"},
		{"{algorithm: token_bucket, unit: hour, requests_per_unit: 5}", "{algorithm: token_bucket, unit: minute, unit_multiplier: 60, requests_per_unit: 5, burst: 5, retry_jitter: 1s}"},
	}
	for _, s := range same {
		if a, b := key(s[0]), key(s[1]); a != b {
			t.Errorf("keys differ: %s %s", a, b)
		}
	}
	differ := []string{
		"{unit: minute, requests_per_unit: 60}",
		"{unit: minute, requests_per_unit: 61}",
		"{unit: hour, requests_per_unit: 60}",
		"{unit: minute, requests_per_unit: 60, algorithm: sliding_window}",
		"{unit: minute, requests_per_unit: 60, algorithm: token_bucket}",
		"{unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 61}",
		"{unit: minute, requests_per_unit: 60, algorithm: leaky_bucket}",
		"{unit: minute, requests_per_unit: 60, algorithm: leaky_bucket_queue}",
	}
	seen := map[string]string{}
	for _, rl := range differ {
		k := key(rl)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s and %s share Key %q", prev, rl, k)
		}
		seen[k] = rl
	}
}
