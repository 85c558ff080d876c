package rlqsapi_test

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/internal/api/rlqsapi"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const policy = `
domain: shop
descriptors:
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: plan
    value: multi
    rate_limits:
      - {unit: minute, requests_per_unit: 2400}
      - {unit: second, requests_per_unit: 20}
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: plan
    value: open
    rate_limit: {unlimited: true}
  - key: plan
    value: watch
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: name
    value: api
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 3000000000}
`

type envoy struct {
	t      *testing.T
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
}

func open(t *testing.T, d *daemontest.Daemon) *envoy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(d.Dial(t)).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &envoy{t: t, stream: s}
}

func usage(asked uint64, elapsed time.Duration, bucket ...string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	id := map[string]string{}
	for i := 0; i+1 < len(bucket); i += 2 {
		id[bucket[i]] = bucket[i+1]
	}
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id}, NumRequestsAllowed: asked}
	if elapsed > 0 {
		u.TimeElapsed = durationpb.New(elapsed)
	}
	return u
}

func (e *envoy) report(domain string, usages ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	e.t.Helper()
	if err := e.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: usages}); err != nil {
		e.t.Fatal(err)
	}
}

// recv returns the actions received until there is one for each of n
// buckets.
func (e *envoy) recv(n int) map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction {
	e.t.Helper()
	got := map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction{}
	for len(got) < n {
		resp, err := e.stream.Recv()
		if err != nil {
			e.t.Fatalf("receiving: %v", err)
		}
		for _, a := range resp.GetBucketAction() {
			got[name(a.GetBucketId())] = a
		}
	}
	return got
}

func name(id *rlqsv3.BucketId) string {
	var parts []string
	for _, e := range rlqsapi.Entries(id.GetBucket()) {
		parts = append(parts, e.Key+"="+e.Value)
	}
	return strings.Join(parts, ",")
}

// describe says what an action tells the client, as a test reads it.
func describe(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	if a.GetAbandonAction() != nil {
		return "abandon"
	}
	q := a.GetQuotaAssignmentAction()
	ttl := q.GetAssignmentTimeToLive().AsDuration()
	s := q.GetRateLimitStrategy()
	if tb := s.GetTokenBucket(); tb != nil {
		return "token_bucket max=" + strconv.FormatUint(uint64(tb.GetMaxTokens()), 10) + " fill=" + strconv.FormatUint(uint64(tb.GetTokensPerFill().GetValue()), 10) + "/" + tb.GetFillInterval().AsDuration().String() + " ttl=" + ttl.String()
	}
	return s.GetBlanketRule().String() + " ttl=" + ttl.String()
}

// TestAssignments: each kind of rule as a stream's first report sees it.
func TestAssignments(t *testing.T) {
	d := daemontest.Start(t, policy)
	e := open(t, d)
	const all = 1 << 40 // asked in one interval: more than any limit
	e.report("shop",
		usage(all, 0, "plan", "gold"),                           // alone: all 600/min, burst 1 (50ms' worth, at least 1), 600 per minute
		usage(all, 0, "plan", "multi"),                          // the lower rate of two: 20/s, not 2400/min
		usage(all, 0, "plan", "free"),                           // requests_per_unit 0
		usage(all, 0, "plan", "open"),                           // unlimited
		usage(all, 0, "plan", "watch"),                          // shadow mode
		usage(all, 0, "plan", "tin"),                            // no rule
		usage(all, 0, "user", "bob", "name", "api"),             // keys in name order: name=api, user=bob
		usage(all, 2*time.Second, "name", "api", "user", "eve"), // its interval 2s: a TTL of 3s
		usage(5, time.Second, "name", "api", "user", "amy"),     // asks 5/s: gets that
	)
	got := e.recv(9)
	// Envoy's units: whole seconds (TTLs of 1.5 report intervals, rounded up).
	want := map[string]string{
		"plan=gold":         "token_bucket max=1 fill=600/1m0s ttl=2s",
		"plan=multi":        "token_bucket max=1 fill=20/1s ttl=2s",
		"plan=free":         "DENY_ALL ttl=2s",
		"plan=open":         "ALLOW_ALL ttl=2s",
		"plan=watch":        "ALLOW_ALL ttl=2s",
		"plan=tin":          "ALLOW_ALL ttl=2s",
		"name=api,user=bob": "token_bucket max=150000000 fill=3000000000/1s ttl=2s",
		"name=api,user=eve": "token_bucket max=150000000 fill=3000000000/1s ttl=3s",
		"name=api,user=amy": "token_bucket max=1 fill=5/1s ttl=2s",
	}
	for b, w := range want {
		if g := describe(got[b]); g != w {
			t.Errorf("%s: got %s, want %s", b, g, w)
		}
	}
	// Another domain on its own stream: unknown, so allowed.
	o := open(t, d)
	o.report("nowhere", usage(1, 0, "plan", "gold"))
	if g := describe(o.recv(1)["plan=gold"]); g != "ALLOW_ALL ttl=2s" {
		t.Errorf("an unknown domain: got %s, want ALLOW_ALL", g)
	}
}

// TestFillInterval: a share as Envoy's token bucket: whole seconds (the
// period's, rounded up), tokens per fill never faster than the share.
func TestFillInterval(t *testing.T) {
	for _, tc := range []struct {
		share  int64
		period time.Duration
		tokens uint32
		every  time.Duration
	}{
		{600, time.Minute, 600, time.Minute},
		{7, time.Minute, 7, time.Minute},
		{5000, 10 * time.Second, 5000, 10 * time.Second},
		{106, time.Second, 106, time.Second},
		{1_000_000, time.Second, 1_000_000, time.Second},
		{3_000_000_000, time.Second, 3_000_000_000, time.Second},
		{5_000_000_000, time.Second, math.MaxUint32, time.Second}, // capped: slower
		{7, 1500 * time.Millisecond, 9, 2 * time.Second},          // 9.33, rounded down
		{1, 500 * time.Millisecond, 2, time.Second},
		{1, time.Nanosecond, 1_000_000_000, time.Second},
		{1, 365 * 24 * time.Hour, 1, 365 * 24 * time.Hour},
		{1, math.MaxInt64, 1, math.MaxInt64 / time.Second * time.Second},
	} {
		tokens, every := rlqsapi.FillInterval(tc.share, tc.period)
		if tokens != tc.tokens || every != tc.every {
			t.Errorf("FillInterval(%d, %v) = %d per %v, want %d per %v", tc.share, tc.period, tokens, every, tc.tokens, tc.every)
		}
		if every%time.Second != 0 || every < time.Second {
			t.Errorf("FillInterval(%d, %v): %v is not whole seconds", tc.share, tc.period, every)
		}
		// never faster than share per period (but for the 292-year period)
		if tc.period < time.Hour*24*365*100 && float64(tokens)/float64(every) > float64(tc.share)/float64(tc.period) {
			t.Errorf("FillInterval(%d, %v): %d per %v is faster", tc.share, tc.period, tokens, every)
		}
	}
}

// TestBadReports: InvalidArgument naming the field.
func TestBadReports(t *testing.T) {
	d := daemontest.Start(t, policy)
	for _, tc := range []struct {
		name    string
		reports []*rlqsv3.RateLimitQuotaUsageReports
		want    string
	}{
		{"no domain", []*rlqsv3.RateLimitQuotaUsageReports{{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(1, 0, "plan", "gold")}}}, "domain: empty"},
		{"another domain", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "shop"}, {Domain: "other"}}, `domain: "other", but this stream serves "shop"`},
		{"no bucket id", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "shop", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(1, 0, "plan", "gold"), {}}}}, "bucket_quota_usages[1].bucket_id: empty"},
		{"empty key", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "shop", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(1, 0, "", "x")}}}, "bucket_quota_usages[0].bucket_id.bucket: an empty key"},
		{"negative elapsed", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "shop", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"plan": "gold"}}, TimeElapsed: durationpb.New(-time.Second)}}}}, "bucket_quota_usages[0].time_elapsed"},
		{"long value", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "shop", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(1, 0, "plan", strings.Repeat("x", 1025))}}}, `bucket_quota_usages[0].bucket_id.bucket["plan"]: value of 1025 bytes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t, d)
			for _, r := range tc.reports {
				if err := e.stream.Send(r); err != nil {
					t.Fatal(err)
				}
			}
			for {
				_, err := e.stream.Recv()
				if err == nil {
					continue
				}
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want InvalidArgument with %q", err, tc.want)
				}
				return
			}
		})
	}
}

func share(t *testing.T, a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	t.Helper()
	return describe(a)
}

// TestPushedAndReclaimed: a second stream's demand shrinks the first's
// share at once, pushed without a report; the newcomer's share grows once
// the smaller one has reached the first (a quarter interval); a stream
// that ends has its share reclaimed once its last assignment expires (its
// TTL, 2s, and a quarter interval after it was sent).
func TestPushedAndReclaimed(t *testing.T) {
	d := daemontest.Start(t, policy)
	t0 := daemontest.T0.UnixNano()
	a, b := open(t, d), open(t, d)
	a.report("shop", usage(1000, time.Second, "plan", "gold")) // 60000/min asked
	if g := share(t, a.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=600/1m0s ttl=2s" {
		t.Fatalf("a alone: %s", g)
	}
	b.report("shop", usage(1000, time.Second, "plan", "gold"))
	if g := share(t, b.recv(1)["plan=gold"]); g != "DENY_ALL ttl=2s" {
		t.Fatalf("b while a may apply all 600: %s", g)
	}
	if g := share(t, a.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=300/1m0s ttl=2s" {
		t.Fatalf("a pushed: %s, want 300/min", g)
	}
	d.Clock.Set(t0 + int64(250*time.Millisecond) - 1)
	d.Quota().Tick()
	if v := d.Quota().View(); len(v) != 1 || v[0].Clients[0].Share+v[0].Clients[1].Share != 300 {
		t.Fatalf("before a's 300 was delivered: %+v", v)
	}
	d.Clock.Set(t0 + int64(250*time.Millisecond))
	d.Quota().Tick()
	if g := share(t, b.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=300/1m0s ttl=2s" {
		t.Fatalf("b pushed once a's 300 was delivered: %s, want 300/min", g)
	}
	d.Clock.Set(t0 + int64(time.Second))
	a.report("shop", usage(1000, time.Second, "plan", "gold"))
	if g := share(t, a.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=300/1m0s ttl=2s" {
		t.Fatalf("a renewed: %s, want 300/min", g)
	}
	b.report("shop", usage(1000, time.Second, "plan", "gold"))
	if g := share(t, b.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=300/1m0s ttl=2s" {
		t.Fatalf("b renewed: %s, want 300/min", g)
	}
	// a's stream ends: its 300, renewed at 1s, is committed until 3.25s.
	if err := a.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a's stream gone", func() bool {
		v := d.Quota().View()
		return len(v) == 1 && len(v[0].Clients) == 2 && (!v[0].Clients[0].Live || !v[0].Clients[1].Live)
	})
	d.Clock.Set(t0 + int64(3250*time.Millisecond) - 1)
	b.report("shop", usage(1000, time.Second, "plan", "gold"))
	if g := share(t, b.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=300/1m0s ttl=2s" {
		t.Fatalf("b before a's 300 expired: %s, want 300/min", g)
	}
	d.Clock.Set(t0 + int64(3250*time.Millisecond))
	d.Quota().Tick()
	if g := share(t, b.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=600/1m0s ttl=2s" {
		t.Fatalf("b pushed as a's 300 expired: %s, want 600/min", g)
	}
	code, body := d.Get(t, "/metrics")
	for _, w := range []string{
		`ratelimitd_quota_reports_total{domain="shop"} 5`,
		`ratelimitd_quota_assignments_total{action="share",domain="shop"} 7`,
		`ratelimitd_quota_assignments_total{action="deny_all",domain="shop"} 1`,
		`ratelimitd_quota_streams 1`,
	} {
		if code != 200 || !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

// TestConsoleView: the console's quota view lists each bucket served by
// quota with its rule and limit, and each client's demand and share.
func TestConsoleView(t *testing.T) {
	d := daemontest.Start(t, policy)
	if code, body := d.Get(t, "/console/api/quota"); code != 200 || body != "{\"buckets\":[]}\n" {
		t.Fatalf("no quota client: %d %q", code, body)
	}
	a, b := open(t, d), open(t, d)
	a.report("shop", usage(3, time.Second, "plan", "gold")) // 180/min
	a.recv(1)
	b.report("shop", usage(1000, time.Second, "plan", "gold"))
	b.recv(1)
	_, body := d.Get(t, "/console/api/quota")
	var v struct {
		Buckets []struct {
			Domain   string            `json:"domain"`
			BucketID map[string]string `json:"bucket_id"`
			Rule     string            `json:"rule"`
			Requests int64             `json:"requests"`
			Period   time.Duration     `json:"period"`
			Clients  []struct {
				Client        string
				Demand, Share int64
				Committed     int64
				Live          bool
			} `json:"clients"`
			Peers map[string]string `json:"peers"`
		} `json:"buckets"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Buckets) != 1 {
		t.Fatalf("buckets: %s", body)
	}
	bk := v.Buckets[0]
	if bk.Domain != "shop" || bk.BucketID["plan"] != "gold" || bk.Rule != "shop.plan_gold" || bk.Requests != 600 || bk.Period != time.Minute {
		t.Errorf("bucket: %s", body)
	}
	// Streams are numbered as their handlers start: a's and b's in either order.
	shares := map[int64]int64{} // demand -> share
	for _, c := range bk.Clients {
		if !c.Live || bk.Peers[c.Client] == "" {
			t.Errorf("client %s: live %v, peer %q", c.Client, c.Live, bk.Peers[c.Client])
		}
		shares[c.Demand] = c.Share
	}
	if len(shares) != 2 || shares[180] != 180 || shares[60000] != 420 {
		t.Errorf("clients: %s; want demands 180 and 60000 with shares 180 and 420", body)
	}
}

// TestStreamBounds: a stream may report at most MaxStreamBuckets buckets
// served by quota; one more is answered DENY_ALL (the stream goes on, and
// its other buckets keep their shares).
func TestStreamBounds(t *testing.T) {
	d := daemontest.Start(t, policy)
	e := open(t, d)
	var usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	for i := range quotaservice.MaxClientBuckets + 1 {
		usages = append(usages, usage(1, 0, "name", "api", "user", "u"+strconv.Itoa(i)))
	}
	e.report("shop", usages...)
	got := e.recv(len(usages))
	if g := describe(got["name=api,user=u1024"]); g != "DENY_ALL ttl=2s" {
		t.Errorf("the stream's 1,025th bucket: %s, want DENY_ALL", g)
	}
	if g := describe(got["name=api,user=u1023"]); !strings.HasPrefix(g, "token_bucket") {
		t.Errorf("the stream's 1,024th bucket: %s, want a share", g)
	}
	e.report("shop", usage(1, time.Second, "name", "api", "user", "u0"))
	if g := describe(e.recv(1)["name=api,user=u0"]); !strings.HasPrefix(g, "token_bucket") {
		t.Errorf("the stream's first bucket, reported again: %s, want a share", g)
	}
}

// TestDrainEndsStreams: as the daemon shuts down, quota streams end with
// Unavailable (clients reconnect elsewhere), rather than holding the
// shutdown until its grace is over.
func TestDrainEndsStreams(t *testing.T) {
	d := daemontest.Start(t, policy)
	e := open(t, d)
	e.report("shop", usage(1, 0, "plan", "gold"))
	e.recv(1)
	go d.Shutdown(context.Background())
	_, err := e.stream.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("got %v, want Unavailable: shutting down", err)
	}
}

// TestDaemons: with QuotaDaemons n, a daemon hands out shares of limit / n
// (rounded down): a lone client asking for everything gets 600/2.
func TestDaemons(t *testing.T) {
	d := daemontest.Start(t, policy, func(c *daemon.Config) { c.QuotaDaemons = 2 })
	e := open(t, d)
	e.report("shop", usage(1<<20, time.Second, "plan", "gold"))
	if g := describe(e.recv(1)["plan=gold"]); g != "token_bucket max=1 fill=300/1m0s ttl=2s" {
		t.Fatalf("a lone client of one of 2 daemons: %s, want 300/min", g)
	}
}
