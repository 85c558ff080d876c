package httplimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/httplimit"
	"github.com/ratelimitd/ratelimitd/client/internal/fakeclock"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// service is an HTTP service behind the middleware, a daemon serving
// daemontest.SmallTiers, and the client's fake clock.
type service struct {
	daemon   *daemontest.Daemon
	client   *client.Client
	clock    *fakeclock.Clock
	url      string
	served   atomic.Int64 // handler runs
	mux      *http.ServeMux
	describe httplimit.DescribeFunc
}

func newClient(t *testing.T, target string, clk client.Clock, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{
		client.WithTimeout(10 * time.Second),
		client.WithLogger(slog.New(slog.DiscardHandler)),
		client.WithClock(clk),
	}, opts...)
	c, err := client.New(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// start serves GET /orders and GET /orders/{id} limited by the three tiers,
// with users named by Authorization, else by client address, and GET
// /billing through the queue. describe, when not nil, replaces the tiers.
func start(t *testing.T, describe httplimit.DescribeFunc, clientOpts []client.Option, opts ...httplimit.Option) *service {
	t.Helper()
	s := &service{daemon: daemontest.Start(t, daemontest.SmallTiers), clock: fakeclock.New(daemontest.T0)}
	s.client = newClient(t, s.daemon.GRPCAddr(), s.clock, clientOpts...)
	s.mux = http.NewServeMux()
	handler := func(w http.ResponseWriter, r *http.Request) {
		s.served.Add(1)
		io.WriteString(w, "served "+r.URL.Path+"\n")
	}
	s.mux.HandleFunc("GET /orders", handler)
	s.mux.HandleFunc("GET /orders/{id}", handler)
	s.mux.HandleFunc("GET /billing", handler)
	if describe == nil {
		route := httplimit.Pattern(s.mux)
		describe = httplimit.Tiers(
			httplimit.Global(),
			httplimit.PerRoute(route),
			httplimit.PerUserPerRoute(route, httplimit.FirstOf(httplimit.Header("Authorization"), httplimit.ClientAddr())),
		)
	}
	s.describe = describe
	srv := httptest.NewServer(httplimit.New(s.client, "default", describe, opts...).Wrap(s.mux))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// response is what a client saw.
type response struct {
	status int
	header http.Header
	body   string
}

func (s *service) get(t *testing.T, path, auth string) response {
	t.Helper()
	req, err := http.NewRequest("GET", s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(body)}
}

// getAsync sends the request from another goroutine.
func (s *service) getAsync(t *testing.T, path, auth string) <-chan response {
	out := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest("GET", s.url+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(out)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		out <- response{resp.StatusCode, resp.Header, string(body)}
	}()
	return out
}

func (s *service) waitForTimers(t *testing.T, n int) {
	t.Helper()
	if !s.clock.WaitForTimers(n, t.Context().Done()) {
		t.Fatal("test ended before the middleware waited")
	}
}

const (
	// The user tier: 2 at once, an empty bucket full again in 240ms.
	policyHeader = `"per-user-per-endpoint";q=2;w=1`
	throttled    = "throttled by policy 'per-user-per-endpoint'; retry after 120 ms\n"
)

func TestTiers(t *testing.T) {
	s := start(t, nil, nil)
	steps := []struct {
		name        string
		path, auth  string
		daemonTime  time.Duration // advance the daemon's clock first
		wantStatus  int
		wantBody    string
		wantHeaders map[string]string // "" means absent; unlisted are not checked
	}{
		{
			name: "alice's first", path: "/orders", auth: "Bearer alice",
			wantStatus: 200, wantBody: "served /orders\n",
			wantHeaders: map[string]string{
				"RateLimit-Policy": policyHeader,
				"RateLimit":        `"per-user-per-endpoint";r=1;t=1`,
				"Retry-After":      "",
			},
		},
		{name: "alice's second", path: "/orders", auth: "Bearer alice", wantStatus: 200},
		{
			name: "alice's third is throttled", path: "/orders", auth: "Bearer alice",
			wantStatus: 429, wantBody: throttled,
			wantHeaders: map[string]string{
				"Retry-After":      "1",
				"RateLimit-Policy": policyHeader,
				"RateLimit":        `"per-user-per-endpoint";r=0;t=1`,
				"Content-Type":     "text/plain; charset=utf-8",
			},
		},
		{name: "bob on the same route", path: "/orders", auth: "Bearer bob", wantStatus: 200},
		{name: "alice on another route", path: "/orders/7", auth: "Bearer alice", wantStatus: 200},
		{name: "alice again on that route (its pattern)", path: "/orders/8", auth: "Bearer alice", wantStatus: 200},
		{name: "and once more", path: "/orders/9", auth: "Bearer alice", wantStatus: 429, wantBody: throttled},
		{name: "anonymous, by client address", path: "/orders", wantStatus: 200},
		{name: "119ms on, alice still waits", path: "/orders", auth: "Bearer alice", daemonTime: 119 * time.Millisecond,
			wantStatus: 429, wantBody: "throttled by policy 'per-user-per-endpoint'; retry after 1 ms\n",
			wantHeaders: map[string]string{"Retry-After": "1"}},
		{name: "at 120ms alice is back", path: "/orders", auth: "Bearer alice", daemonTime: time.Millisecond, wantStatus: 200},
	}
	wantServed := int64(0)
	for _, st := range steps {
		s.daemon.Clock.Advance(st.daemonTime)
		got := s.get(t, st.path, st.auth)
		if got.status != st.wantStatus {
			t.Errorf("%s: status %d, want %d (body %q)", st.name, got.status, st.wantStatus, got.body)
		}
		if st.wantBody != "" && got.body != st.wantBody {
			t.Errorf("%s: body %q, want %q", st.name, got.body, st.wantBody)
		}
		for k, want := range st.wantHeaders {
			if v := got.header.Get(k); v != want {
				t.Errorf("%s: %s: %q, want %q", st.name, k, v, want)
			}
		}
		if st.wantStatus == 200 {
			wantServed++
		}
		if n := s.served.Load(); n != wantServed {
			t.Fatalf("%s: handler ran %d times, want %d", st.name, n, wantServed)
		}
	}
}

func TestOverCapacityHasNoRetryAfter(t *testing.T) {
	export := func(*http.Request) []client.Descriptor {
		return []client.Descriptor{client.NewDescriptor("export", "all").WithHits(3)}
	}
	s := start(t, export, nil)
	got := s.get(t, "/orders", "")
	want := "throttled by policy 'exports'; the request costs more than the limit's capacity, so no wait will admit it\n"
	if got.status != 429 || got.body != want || got.header.Get("Retry-After") != "" {
		t.Errorf("got %d %q Retry-After %q; want 429, %q, no Retry-After", got.status, got.body, got.header.Get("Retry-After"), want)
	}
}

func billing(*http.Request) []client.Descriptor {
	return []client.Descriptor{client.NewDescriptor("queue", "billing")}
}

func TestQueueDelayIsWaitedBeforeTheHandler(t *testing.T) {
	s := start(t, billing, nil)
	if got := s.get(t, "/billing", ""); got.status != 200 {
		t.Fatalf("first: %d, want 200 at once", got.status)
	}
	// The second leaves the queue 100ms after the first.
	second := s.getAsync(t, "/billing", "")
	s.waitForTimers(t, 1)
	s.clock.Advance(100*time.Millisecond - 1)
	if n := s.served.Load(); n != 1 {
		t.Fatalf("handler ran %d times 1ns before the delay ended, want 1", n)
	}
	s.clock.Advance(1)
	if got := <-second; got.status != 200 || got.body != "served /billing\n" {
		t.Fatalf("second: %d %q, want 200 after its delay", got.status, got.body)
	}
	if n := s.served.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func TestQueueDelayEndsWithTheRequestContext(t *testing.T) {
	s := start(t, billing, nil)
	limit := httplimit.New(s.client, "default", billing).Wrap(s.mux)
	for i, wantStatus := range []int{200, 503} {
		ctx, cancel := context.WithCancel(context.Background())
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			limit.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/billing", nil))
			close(done)
		}()
		if i == 1 { // queued 100ms: give up while waiting
			s.waitForTimers(t, 1)
			cancel()
		}
		<-done
		cancel()
		if rec.Code != wantStatus {
			t.Errorf("request %d: %d %q, want %d", i+1, rec.Code, rec.Body, wantStatus)
		}
	}
	if n := s.served.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1: not for the request that gave up", n)
	}
}

func TestTarpit(t *testing.T) {
	s := start(t, nil, nil, httplimit.WithTarpit(100*time.Millisecond, 1))
	for range 2 {
		s.get(t, "/orders", "Bearer alice")
	}
	held := s.getAsync(t, "/orders", "Bearer alice")
	s.waitForTimers(t, 1)
	// A second denial while one is held: answered at once (maxHeld 1).
	if got := s.get(t, "/orders", "Bearer alice"); got.status != 429 || got.body != throttled {
		t.Errorf("beyond maxHeld: %d %q, want 429 at once", got.status, got.body)
	}
	select {
	case got := <-held:
		t.Fatalf("answered before the hold ended: %d %q", got.status, got.body)
	default:
	}
	s.clock.Advance(100 * time.Millisecond)
	got := <-held
	// The wait left after the hold: 120ms - 100ms.
	if got.status != 429 || got.body != "throttled by policy 'per-user-per-endpoint'; retry after 20 ms\n" || got.header.Get("Retry-After") != "1" {
		t.Errorf("held: %d %q Retry-After %q", got.status, got.body, got.header.Get("Retry-After"))
	}
	// A hold longer than the wait: retry at once.
	s2 := start(t, nil, nil, httplimit.WithTarpit(time.Second, 10))
	for range 2 {
		s2.get(t, "/orders", "Bearer alice")
	}
	held = s2.getAsync(t, "/orders", "Bearer alice")
	s2.waitForTimers(t, 1)
	s2.clock.Advance(time.Second)
	got = <-held
	if got.status != 429 || got.body != "throttled by policy 'per-user-per-endpoint'; retry after 0 ms\n" || got.header.Get("Retry-After") != "0" {
		t.Errorf("held past the wait: %d %q Retry-After %q", got.status, got.body, got.header.Get("Retry-After"))
	}
}

// A denied request is answered 429 whatever happens during the tarpit's
// hold: an outer middleware's deadline or cancellation on the request's
// context, while the client still waits, ends the hold early but never
// turns the denial into net/http's default 200.
func TestTarpitHoldCutShortStillAnswers429(t *testing.T) {
	tests := []struct {
		name      string
		held      time.Duration // on the client's clock before the context ends
		wantBody  string
		wantRetry string
	}{
		{"context ends at once", 0, throttled, "1"},
		{"context ends 50ms into the hold", 50 * time.Millisecond, "throttled by policy 'per-user-per-endpoint'; retry after 70 ms\n", "1"},
		{"context ends after the wait, before the hold ends", 500 * time.Millisecond, "throttled by policy 'per-user-per-endpoint'; retry after 0 ms\n", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, nil, nil)
			// The outer middleware: the request's context ends when the
			// test says so.
			end := make(chan struct{})
			limit := httplimit.New(s.client, "default", s.describe, httplimit.WithTarpit(time.Second, 10)).Wrap(s.mux)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				go func() {
					select {
					case <-end:
						cancel()
					case <-ctx.Done():
					}
				}()
				limit.ServeHTTP(w, r.WithContext(ctx))
			}))
			t.Cleanup(srv.Close)
			s.url = srv.URL
			for range 2 {
				if got := s.get(t, "/orders", "Bearer alice"); got.status != 200 {
					t.Fatalf("spending: %d %q", got.status, got.body)
				}
			}
			held := s.getAsync(t, "/orders", "Bearer alice")
			s.waitForTimers(t, 1)
			s.clock.Advance(tt.held)
			close(end)
			got := <-held
			if got.status != 429 || got.body != tt.wantBody || got.header.Get("Retry-After") != tt.wantRetry {
				t.Errorf("got %d %q Retry-After %q, want 429 %q %q", got.status, got.body, got.header.Get("Retry-After"), tt.wantBody, tt.wantRetry)
			}
			if p := got.header.Get("RateLimit-Policy"); p != policyHeader {
				t.Errorf("RateLimit-Policy %q, want %q", p, policyHeader)
			}
			if n := s.served.Load(); n != 2 {
				t.Errorf("handler ran %d times, want 2", n)
			}
		})
	}
}

// The 429's body names the policy its RateLimit headers describe, chosen
// as the service ranks its statuses.
func TestBodyAndHeadersNameTheSamePolicy(t *testing.T) {
	window := func(n uint32, name string) client.Limit {
		return client.Limit{Algorithm: ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, Requests: n, Period: time.Minute, Name: name}
	}
	bulk := client.NewDescriptor("export", "bulk").WithLimit(window(10, "bulk"))
	small := client.NewDescriptor("export", "small").WithLimit(window(3, "small"))
	tests := []struct {
		name       string
		spend      []client.Descriptor
		ask        []client.Descriptor
		wantBody   string
		wantPolicy string
		wantLimit  string
	}{
		{
			// Both cost more than their capacity: the fewer remaining binds
			// harder, 2 of small's 3 against 5 of bulk's 10.
			name:       "over capacity twice",
			spend:      []client.Descriptor{bulk.WithHits(5), small.WithHits(1)},
			ask:        []client.Descriptor{bulk.WithHits(11), small.WithHits(4)},
			wantBody:   "throttled by policy 'small'; the request costs more than the limit's capacity, so no wait will admit it\n",
			wantPolicy: `"small";q=3;w=60`,
			wantLimit:  `"small";r=2;t=60`,
		},
		{
			name:       "over limit twice, equal waits: the first",
			spend:      []client.Descriptor{bulk.WithHits(10), small.WithHits(3)},
			ask:        []client.Descriptor{bulk, small},
			wantBody:   "throttled by policy 'bulk'; retry after 60 s\n",
			wantPolicy: `"bulk";q=10;w=60`,
			wantLimit:  `"bulk";r=0;t=60`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, func(*http.Request) []client.Descriptor { return tt.ask }, nil)
			if d, err := s.client.Charge(context.Background(), "default", tt.spend...); err != nil || !d.Allowed {
				t.Fatalf("spending: %v %v", d, err)
			}
			got := s.get(t, "/orders", "")
			if got.status != 429 || got.body != tt.wantBody {
				t.Errorf("got %d %q, want 429 %q", got.status, got.body, tt.wantBody)
			}
			if p, l := got.header.Get("RateLimit-Policy"), got.header.Get("RateLimit"); p != tt.wantPolicy || l != tt.wantLimit {
				t.Errorf("RateLimit-Policy %q RateLimit %q\nwant             %q           %q", p, l, tt.wantPolicy, tt.wantLimit)
			}
		})
	}
}

func TestFailurePolicyWithTheDaemonStopped(t *testing.T) {
	tests := []struct {
		name       string
		opts       []client.Option
		wantStatus int
		wantBody   string
		wantRetry  string
	}{
		{"fail open", nil, 200, "served /orders\n", ""},
		{"fail closed", []client.Option{client.WithFailClosed(1500 * time.Millisecond)}, 503,
			"rate limit service unavailable, failing closed; retry after 2 s\n", "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failures atomic.Int64
			opts := append(tt.opts, client.WithFailureHook(func(error, client.Decision) { failures.Add(1) }))
			s := start(t, nil, opts)
			s.daemon.Stop()
			got := s.get(t, "/orders", "Bearer alice")
			if got.status != tt.wantStatus || got.body != tt.wantBody || got.header.Get("Retry-After") != tt.wantRetry {
				t.Errorf("got %d %q Retry-After %q, want %d %q %q", got.status, got.body, got.header.Get("Retry-After"), tt.wantStatus, tt.wantBody, tt.wantRetry)
			}
			if h := got.header.Get("RateLimit"); h != "" {
				t.Errorf("RateLimit %q with no decision from the service", h)
			}
			if n := failures.Load(); n != 1 {
				t.Errorf("failure hook called %d times, want 1", n)
			}
		})
	}
}

func TestLocalDenyThroughTheMiddleware(t *testing.T) {
	var rpcs atomic.Int64
	s := start(t, nil, []client.Option{client.WithLocalDeny(100), client.WithFailureHook(func(error, client.Decision) { rpcs.Add(1) })})
	for range 3 {
		s.get(t, "/orders", "Bearer alice")
	}
	s.daemon.Stop() // from here, any call would fail open
	s.clock.Advance(20 * time.Millisecond)
	got := s.get(t, "/orders", "Bearer alice")
	if got.status != 429 || got.body != "throttled by policy 'per-user-per-endpoint'; retry after 100 ms\n" {
		t.Errorf("got %d %q, want a local 429", got.status, got.body)
	}
	if h := got.header.Get("RateLimit"); h != `"per-user-per-endpoint";r=0;t=1` {
		t.Errorf("RateLimit %q", h)
	}
	if rpcs.Load() != 0 {
		t.Error("the service was called")
	}
}

func TestNoDescriptorsNoCall(t *testing.T) {
	none := func(*http.Request) []client.Descriptor { return nil }
	s := start(t, none, []client.Option{client.WithFailClosed(0)})
	s.daemon.Stop() // a call would fail closed
	if got := s.get(t, "/orders", ""); got.status != 200 {
		t.Errorf("status %d, want 200 without a call", got.status)
	}
}

func TestDescribe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(http.ResponseWriter, *http.Request) {})
	user := httplimit.FirstOf(httplimit.Header("Authorization"), httplimit.ClientAddr())
	tests := []struct {
		name     string
		describe httplimit.DescribeFunc
		path     string
		header   map[string]string
		want     []string
	}{
		{"global", httplimit.Global(), "/orders/1", nil, []string{"generic_key=global"}},
		{"per route by path", httplimit.PerRoute(httplimit.Path()), "/orders/1", nil, []string{"path=/orders/1"}},
		{"per route by pattern", httplimit.PerRoute(httplimit.Pattern(mux)), "/orders/1", nil, []string{"path=GET /orders/{id}"}},
		{"no pattern matches", httplimit.PerRoute(httplimit.Pattern(mux)), "/nowhere", nil, []string{"path="}},
		{"user by header digest", httplimit.PerUserPerRoute(httplimit.Path(), httplimit.Header("Authorization")), "/a",
			map[string]string{"Authorization": "Bearer alice"}, []string{"path=/a, user=" + digest("Bearer alice")}},
		{"no header: the tier is left out", httplimit.PerUserPerRoute(httplimit.Path(), httplimit.Header("Authorization")), "/a", nil, nil},
		{"user by address", httplimit.PerUserPerRoute(httplimit.Path(), httplimit.ClientAddr()), "/a", nil, []string{"path=/a, user=192.0.2.1"}},
		{"first of: header", httplimit.PerUserPerRoute(httplimit.Path(), user), "/a",
			map[string]string{"Authorization": "k"}, []string{"path=/a, user=" + digest("k")}},
		{"first of: address", httplimit.PerUserPerRoute(httplimit.Path(), user), "/a", nil, []string{"path=/a, user=192.0.2.1"}},
		{"by user agent", httplimit.PerUserPerRoute(httplimit.Path(), httplimit.Header("User-Agent")), "/a",
			map[string]string{"User-Agent": "curl/8.0"}, []string{"path=/a, user=" + digest("curl/8.0")}},
		{"tiers in order", httplimit.Tiers(httplimit.Global(), httplimit.PerRoute(httplimit.Path()), httplimit.PerUserPerRoute(httplimit.Path(), user)), "/a",
			nil, []string{"generic_key=global", "path=/a", "path=/a, user=192.0.2.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.path, nil) // RemoteAddr 192.0.2.1:1234
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			var got []string
			for _, d := range tt.describe(r) {
				got = append(got, d.String())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("descriptor %d: %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// digest is what Header sends for a value: the first 16 bytes of its
// SHA-256, in hex.
func digest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}
