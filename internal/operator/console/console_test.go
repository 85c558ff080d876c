package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/observe/topdenied"
	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

const policy = `
domain: shop
descriptors:
  - key: path
    value: /orders
    rate_limit: {name: orders, algorithm: fixed_window, unit: minute, requests_per_unit: 100}
    descriptors:
      - key: user
        rate_limit: {name: per-user, algorithm: token_bucket, unit: minute, requests_per_unit: 3, burst: 3}
  - key: beta
    shadow_mode: true
    rate_limit: {name: beta, algorithm: sliding_window, unit: second, requests_per_unit: 1}
`

func getJSON(t *testing.T, d *daemontest.Daemon, path string, v any) {
	t.Helper()
	code, body := d.Get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// simulate posts the parameters of query (as a query string) to
// /console/api/simulate as a JSON object, and returns the status code and
// body.
func simulate(t *testing.T, d *daemontest.Daemon, query string) (int, string) {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]string{}
	for k := range q {
		params[k] = q.Get(k)
	}
	b, _ := json.Marshal(params)
	return post(t, d, "/console/api/simulate", "application/json", string(b))
}

// post sends body with contentType to path on the daemon's admin address.
func post(t *testing.T, d *daemontest.Daemon, path, contentType, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+d.AdminAddr()+path, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func simulateJSON(t *testing.T, d *daemontest.Daemon, query string, v any) {
	t.Helper()
	code, body := simulate(t, d, query)
	if code != http.StatusOK {
		t.Fatalf("simulate %s: %d %s", query, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("simulate %s: %v in %s", query, err, body)
	}
}

func desc(kv ...string) *rl.Descriptor {
	d := &rl.Descriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rl.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// call sends one request of the descriptors and returns its overall code.
func call(t *testing.T, c rl.RateLimitServiceClient, ds ...*rl.Descriptor) rl.Code {
	t.Helper()
	r, err := c.ShouldRateLimit(context.Background(), &rl.ShouldRateLimitRequest{Domain: "shop", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return r.OverallCode
}

func TestPage(t *testing.T) {
	d := daemontest.Start(t, policy)
	code, body := d.Get(t, "/console")
	if code != http.StatusOK || !strings.Contains(body, "<title>ratelimitd console</title>") || !strings.Contains(body, `src="/console/assets/app.js"`) {
		t.Fatalf("GET /console: %d %.200s", code, body)
	}
	for _, asset := range []string{"/console/assets/app.js", "/console/assets/style.css"} {
		if code, body := d.Get(t, asset); code != http.StatusOK || len(body) < 500 {
			t.Errorf("GET %s: %d, %d bytes", asset, code, len(body))
		}
	}
	off := daemontest.Start(t, policy, func(c *daemon.Config) { c.NoConsole = true })
	if code, _ := off.Get(t, "/console"); code != http.StatusNotFound {
		t.Errorf("with the console off, GET /console = %d; want 404", code)
	}
}

func TestPolicyAndReloadStatus(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, "", daemontest.Path(path))
	var body struct {
		Config   string `json:"config"`
		LoadedAt string `json:"loaded_at"`
		Domains  []struct {
			Domain      string `json:"domain"`
			Descriptors []struct {
				Key         string `json:"key"`
				Descriptors []struct {
					StatKey string `json:"stat_key"`
				} `json:"descriptors"`
			} `json:"descriptors"`
		} `json:"domains"`
		Reload struct {
			LastError string `json:"last_error"`
		} `json:"reload"`
	}
	getJSON(t, d, "/console/api/policy", &body)
	if body.Config != path || len(body.Domains) != 1 || body.Domains[0].Domain != "shop" ||
		body.Domains[0].Descriptors[1].Descriptors[0].StatKey != "shop.path_/orders.user" || body.Reload.LastError != "" {
		t.Fatalf("policy: %+v", body)
	}
	// A page that has this policy asks only for the reload status.
	var again struct {
		Unchanged bool            `json:"unchanged"`
		Domains   json.RawMessage `json:"domains"`
	}
	getJSON(t, d, "/console/api/policy?since="+url.QueryEscape(body.LoadedAt), &again)
	if !again.Unchanged || again.Domains != nil {
		t.Errorf("since=loaded_at: unchanged %v, domains %s; want unchanged and no policy", again.Unchanged, again.Domains)
	}
	// A bad policy is reported with its file and line; the old one serves.
	if err := os.WriteFile(path, []byte("domain: shop\ndescriptors:\n  - key: path\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err == nil {
		t.Fatal("reload of a bad policy succeeded")
	}
	getJSON(t, d, "/console/api/policy", &body)
	if !strings.Contains(body.Reload.LastError, "policy.yaml:4") || body.Domains[0].Domain != "shop" {
		t.Errorf("after a failed reload: last_error %q; want it to name policy.yaml:4, and the old policy", body.Reload.LastError)
	}
}

func TestTopDenied(t *testing.T) {
	d := daemontest.Start(t, policy, func(c *daemon.Config) { c.ConsoleValues = topdenied.Plain })
	c := rl.NewRateLimitServiceClient(d.Dial(t))
	for range 5 { // 3 admitted, 2 denied
		call(t, c, desc("path", "/orders", "user", "mallory"))
	}
	call(t, c, desc("path", "/orders", "user", "alice"))
	call(t, c, desc("beta", "x"))
	call(t, c, desc("beta", "x")) // the shadow rule would deny: let through, listed as shadow

	var body struct{ Top []topdenied.Entry }
	getJSON(t, d, "/console/api/top", &body)
	want := []topdenied.Entry{
		{Descriptor: "shop: path=/orders, user=mallory", Denials: 2},
		{Descriptor: "shop: beta=x", Denials: 1, Shadow: true},
	}
	if fmt.Sprint(body.Top) != fmt.Sprint(want) {
		t.Errorf("top = %+v\nwant  %+v", body.Top, want)
	}
	code, text := d.Get(t, "/console/api/top?format=text&n=1")
	if code != http.StatusOK || !strings.Contains(text, "DENIALS") || !strings.Contains(text, "user=mallory") || strings.Contains(text, "beta") {
		t.Errorf("text form (n=1): %d\n%s", code, text)
	}
	if code, body := d.Get(t, "/console/api/top?n=zero"); code != http.StatusBadRequest || !strings.Contains(body, "n:") {
		t.Errorf("n=zero: %d %s; want 400 naming n", code, body)
	}
}

func TestInspectChargesNothing(t *testing.T) {
	d := daemontest.Start(t, policy)
	c := rl.NewRateLimitServiceClient(d.Dial(t))
	call(t, c, desc("path", "/orders", "user", "alice"))

	type bucket struct {
		Descriptor, Rule, Algorithm, Limit string
		Matched                            bool
		Remaining                          int64
	}
	var body struct{ Buckets []bucket }
	q := "/console/api/inspect?domain=shop&entry=" + url.QueryEscape("path=/orders") + "&entry=" + url.QueryEscape("user=alice")
	for range 3 { // peeking again and again charges nothing
		getJSON(t, d, q, &body)
	}
	want := []bucket{
		{Descriptor: "path=/orders", Rule: "orders", Algorithm: "fixed_window", Limit: "100 per 1m0s", Matched: true, Remaining: 100},
		{Descriptor: "path=/orders, user=alice", Rule: "per-user", Algorithm: "token_bucket", Limit: "3 per 1m0s", Matched: true, Remaining: 2},
	}
	if fmt.Sprint(body.Buckets) != fmt.Sprint(want) {
		t.Errorf("inspect = %+v\nwant      %+v", body.Buckets, want)
	}
	for _, tc := range []struct{ query, want string }{
		{"?domain=shop", "entry: give at least one"},
		{"?domain=shop&entry=path", `entry[0]: want key=value`},
		{"?domain=&entry=a=b", "domain: must not be empty"},
	} {
		if code, body := d.Get(t, "/console/api/inspect"+tc.query); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("inspect%s: %d %s; want 400 with %q", tc.query, code, body, tc.want)
		}
	}
}

func TestSimulate(t *testing.T) {
	d := daemontest.Start(t, policy)
	type lane struct {
		Lane                string
		Admitted, Denied    int
		MaxAdmittedInPeriod int `json:"max_admitted_in_period"`
	}
	var body struct {
		Requests int
		Lanes    []lane
		SVG      string
	}
	simulateJSON(t, d, "alg=fixed_window,sliding_window,token_bucket&requests=10&period=1m&pattern=boundary&size=10", &body)
	want := []lane{{"fixed_window", 20, 0, 20}, {"sliding_window", 10, 10, 10}, {"token_bucket", 10, 10, 10}}
	if body.Requests != 20 || fmt.Sprint(body.Lanes) != fmt.Sprint(want) || !strings.HasPrefix(body.SVG, "<svg") {
		t.Errorf("boundary simulation: %d requests, %+v; want 20 and %+v", body.Requests, body.Lanes, want)
	}
	// A rule of the policy, by its stat key.
	simulateJSON(t, d, "domain=shop&stat_key="+url.QueryEscape("shop.path_/orders.user")+"&pattern=steady&rate=1&duration=1m", &body)
	if len(body.Lanes) != 1 || body.Lanes[0].Lane != "per-user (token_bucket)" || body.Lanes[0].Admitted != 5 {
		t.Errorf("rule per-user, 1/s for a minute: %+v; want 5 admitted (a burst of 3 at 0-2s, one token each at 20s and 40s)", body.Lanes)
	}
	// A concurrency lane beside a rate: 2 a second holding a second each,
	// one in four never released, under 3 in flight and a minute's lease.
	// Only the concurrency releases, and says how many did.
	var held struct {
		Lanes []struct {
			Lane     string
			Admitted int
			Released *int
		}
	}
	simulateJSON(t, d, "alg=concurrency,token_bucket&requests=3&period=1m&pattern=steady&rate=2&duration=3m&hold=1s&unreleased=0.25", &held)
	if l := held.Lanes; len(l) != 2 || l[0].Lane != "concurrency" || l[0].Admitted != 36 || l[0].Released == nil || *l[0].Released != 27 || l[1].Released != nil {
		t.Errorf("a concurrency holding 1s, a quarter unreleased: %+v; want 36 admitted and 27 released, and no released for the token bucket", held.Lanes)
	}
	for _, tc := range []struct{ query, want string }{
		{"alg=concurrency&requests=2&period=1m&pattern=steady&rate=1&hold=soon", "hold:"},
		{"alg=concurrency&requests=2&period=1m&pattern=steady&rate=1&hold=1s&unreleased=half", "unreleased:"},
		{"alg=concurrency&requests=2&period=1m&pattern=steady&rate=1&hold=1s&unreleased=2", "unreleased: must be a fraction"},
		{"alg=fixed_window&requests=0&period=1m&pattern=steady&rate=1", "requests:"},
		{"alg=fixed_window&requests=1&period=soon&pattern=steady&rate=1", "period:"},
		{"alg=gcra&requests=1&period=1m&pattern=steady&rate=1", "alg:"},
		{"alg=fixed_window&requests=1&period=1m&pattern=zipf", `want one of steady, bursts`},
		{"domain=shop&stat_key=nope&pattern=steady&rate=1", `stat_key: no rule`},
		{"alg=fixed_window&requests=1&period=1m&pattern=steady&rate=1e9&duration=1h", "more than"},
		{"alg=" + strings.Repeat("token_bucket,", 8) + "token_bucket&requests=1&period=1m&pattern=steady&rate=1", "alg: 9 algorithms; at most 8"},
	} {
		if code, body := simulate(t, d, tc.query); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("simulate %s: %d %s; want 400 with %q", tc.query, code, body, tc.want)
		}
	}
}

// TestSimulateNotCrossSite: a simulation costs CPU, so only a request a
// page of another origin cannot send without a preflight runs one: a POST
// of JSON. A GET (an image tag), a form or a text/plain POST is refused.
func TestSimulateNotCrossSite(t *testing.T) {
	d := daemontest.Start(t, policy)
	const params = `{"alg": "token_bucket", "requests": "10", "period": "1m", "pattern": "steady", "rate": "1"}`
	if code, body := d.Get(t, "/console/api/simulate?alg=token_bucket&requests=10&period=1m&pattern=steady&rate=1"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d %s, want 405", code, body)
	}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		if code, body := post(t, d, "/console/api/simulate", ct, params); code != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s: %d %s, want 415", ct, code, body)
		}
	}
	if code, body := post(t, d, "/console/api/simulate", "application/json", params); code != http.StatusOK {
		t.Errorf("POST application/json: %d %s, want 200", code, body)
	}
}

func TestLive(t *testing.T) {
	d := daemontest.Start(t, policy)
	c := rl.NewRateLimitServiceClient(d.Dial(t))
	type rate struct{ Admitted, Denied float64 }
	var view struct {
		Total []rate
		Rules []struct {
			Domain, Rule string
			Now          rate
		}
	}
	getJSON(t, d, "/console/api/live", &view) // the baseline sample
	for range 5 {
		call(t, c, desc("path", "/orders"), desc("path", "/orders", "user", "bob"))
	}
	// The live view samples at most once every 0.9s (longer when sampling
	// is slow): ask until the second sample is there.
	wait.For(t, "the live view's second sample", func() bool {
		getJSON(t, d, "/console/api/live", &view)
		return len(view.Total) > 0
	})
	if len(view.Total) != 1 || view.Total[0].Admitted <= 0 || view.Total[0].Denied <= 0 {
		t.Fatalf("live total after 5 calls (3 admitted, 2 denied by per-user): %+v", view.Total)
	}
	// 8 admitted hits (5 on orders, 3 on per-user) and 2 denied, over
	// about a second.
	ratio := view.Total[0].Admitted / view.Total[0].Denied
	if math.Abs(ratio-4) > 1e-9 {
		t.Errorf("admitted/denied = %v; want 4 (8 admitted hits to 2 denied)", ratio)
	}
	if len(view.Rules) != 2 || view.Rules[0].Rule != "path_/orders" || view.Rules[1].Rule != "path_/orders.user" {
		t.Errorf("busiest rules: %+v; want path_/orders then path_/orders.user", view.Rules)
	}
}
