package client_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/internal/fakeclock"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// The three tiers of the default policy for alice on /orders.
var (
	global = client.NewDescriptor("generic_key", "global")
	orders = client.NewDescriptor("path", "/orders")
	alice  = orders.With("user", "alice")
	bob    = orders.With("user", "bob")
)

// calls counts the client's calls to the service.
type calls struct{ n atomic.Int64 }

func (c *calls) option() client.Option {
	return client.WithDialOptions(grpc.WithUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.n.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// newClient returns a client of target with a generous timeout (a loaded CI
// machine must not turn answers into failures) and a quiet logger.
func newClient(t *testing.T, target string, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithTimeout(10 * time.Second), client.WithLogger(quiet)}, opts...)
	c, err := client.New(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var quiet = slog.New(slog.DiscardHandler)

func check(t *testing.T, c *client.Client, ds ...client.Descriptor) client.Decision {
	t.Helper()
	d, err := c.Charge(context.Background(), "default", ds...)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	return d
}

func TestCheckAdmitsAndReportsEveryTier(t *testing.T) {
	d := daemontest.Start(t, "")
	c := newClient(t, d.GRPCAddr())
	got := check(t, c, global, orders, alice)
	if !got.Allowed || got.Source != client.SourceService || got.RetryAfter != 0 || got.Delay != 0 || got.Policy != "" || got.Err != nil {
		t.Fatalf("decision %+v, want allowed by the service", got)
	}
	if s := got.String(); s != "allowed" {
		t.Errorf("String() = %q", s)
	}
	want := []struct {
		rule      string
		remaining uint64
	}{{"global", 6999}, {"per-endpoint", 3999}, {"per-user-per-endpoint", 799}}
	sts := got.Response.GetStatuses()
	if len(sts) != len(want) {
		t.Fatalf("%d statuses, want %d", len(sts), len(want))
	}
	for i, w := range want {
		if sts[i].GetRule().GetName() != w.rule || sts[i].GetRemaining() != w.remaining {
			t.Errorf("status %d: rule %q remaining %d, want %q %d", i, sts[i].GetRule().GetName(), sts[i].GetRemaining(), w.rule, w.remaining)
		}
	}
}

func TestCheckDenials(t *testing.T) {
	tests := []struct {
		name        string
		spend       []client.Descriptor // charged first, must be admitted
		ask         []client.Descriptor
		wantRetry   time.Duration
		wantNever   bool
		wantPolicy  string
		wantMessage string
	}{
		{
			name:        "user tier spent: one token at 600 per minute",
			spend:       []client.Descriptor{alice.WithHits(800)},
			ask:         []client.Descriptor{global, orders, alice},
			wantRetry:   100 * time.Millisecond,
			wantPolicy:  "per-user-per-endpoint",
			wantMessage: "throttled by policy 'per-user-per-endpoint'; retry after 100 ms",
		},
		{
			name:        "the longest retry_after names the policy",
			spend:       []client.Descriptor{orders.WithHits(4000), alice.WithHits(800)},
			ask:         []client.Descriptor{orders.WithHits(10), alice},
			wantRetry:   200 * time.Millisecond, // 10 tokens at 3000 per minute
			wantPolicy:  "per-endpoint",
			wantMessage: "throttled by policy 'per-endpoint'; retry after 200 ms",
		},
		{
			name:        "inline limit, waits of a second and more in whole seconds",
			spend:       []client.Descriptor{tenant.WithHits(2)},
			ask:         []client.Descriptor{tenant},
			wantRetry:   30 * time.Second,
			wantPolicy:  "tenant-quota",
			wantMessage: "throttled by policy 'tenant-quota'; retry after 30 s",
		},
		{
			name:        "a rule without a name is named by the descriptor",
			spend:       []client.Descriptor{client.NewDescriptor("tenant", "acme").With("plan", "free").WithLimit(perMinute(1, ""))},
			ask:         []client.Descriptor{client.NewDescriptor("tenant", "acme").With("plan", "free").WithLimit(perMinute(1, ""))},
			wantRetry:   time.Minute,
			wantPolicy:  "tenant=acme, plan=free",
			wantMessage: "throttled by policy 'tenant=acme, plan=free'; retry after 60 s",
		},
		{
			// Both over capacity: the fewer remaining (2 of 3, against 5
			// of 10) binds harder, as the service ranks its statuses.
			name:        "over capacity twice: the fewer remaining names the policy",
			spend:       []client.Descriptor{bulk.WithHits(5), small.WithHits(1)},
			ask:         []client.Descriptor{bulk.WithHits(11), small.WithHits(4)},
			wantNever:   true,
			wantPolicy:  "small",
			wantMessage: "throttled by policy 'small'; the request costs more than the limit's capacity, so no wait will admit it",
		},
		{
			name:        "over capacity: never, and no retry time",
			ask:         []client.Descriptor{alice, client.NewDescriptor("export", "all").WithHits(3).WithLimit(perMinute(2, "exports"))},
			wantNever:   true,
			wantPolicy:  "exports",
			wantMessage: "throttled by policy 'exports'; the request costs more than the limit's capacity, so no wait will admit it",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := daemontest.Start(t, "")
			c := newClient(t, d.GRPCAddr())
			if len(tt.spend) > 0 {
				if got := check(t, c, tt.spend...); !got.Allowed {
					t.Fatalf("spending: %v", got)
				}
			}
			got := check(t, c, tt.ask...)
			if got.Allowed || got.Source != client.SourceService {
				t.Fatalf("decision %+v, want denied by the service", got)
			}
			if got.RetryAfter != tt.wantRetry || got.Never != tt.wantNever || got.Policy != tt.wantPolicy {
				t.Errorf("RetryAfter %v Never %v Policy %q, want %v %v %q", got.RetryAfter, got.Never, got.Policy, tt.wantRetry, tt.wantNever, tt.wantPolicy)
			}
			if s := got.String(); s != tt.wantMessage {
				t.Errorf("String() = %q\nwant        %q", s, tt.wantMessage)
			}
		})
	}
}

// tenant has an inline token bucket of 2, refilled at 2 per minute.
var tenant = client.NewDescriptor("tenant", "acme").WithLimit(client.Limit{
	Algorithm: ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Requests: 2, Period: time.Minute, Name: "tenant-quota",
})

// bulk and small are inline windows of 10 and 3 a minute.
var (
	bulk  = client.NewDescriptor("export", "bulk").WithLimit(perMinute(10, "bulk"))
	small = client.NewDescriptor("export", "small").WithLimit(perMinute(3, "small"))
)

func perMinute(n uint32, name string) client.Limit {
	return client.Limit{Algorithm: ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, Requests: n, Period: time.Minute, Name: name}
}

func TestCheckQueueDelays(t *testing.T) {
	// 10 per second through a queue of 3: admitted requests leave 100ms
	// apart, the first at once; the fourth finds the queue full.
	queue := client.NewDescriptor("backend", "billing").WithLimit(client.Limit{
		Algorithm: ratelimitv1.Algorithm_ALGORITHM_LEAKY_BUCKET_QUEUE, Requests: 10, Period: time.Second, Burst: 3, Name: "billing-queue",
	})
	d := daemontest.Start(t, "")
	c := newClient(t, d.GRPCAddr())
	for i, want := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		got := check(t, c, global, queue)
		if !got.Allowed || got.Delay != want {
			t.Fatalf("request %d: %+v, want allowed with delay %v", i+1, got, want)
		}
	}
	got := check(t, c, global, queue)
	if got.Allowed || got.Delay != 0 || got.RetryAfter != 100*time.Millisecond || got.Policy != "billing-queue" {
		t.Fatalf("request 4: %+v, want denied for 100ms by billing-queue", got)
	}
	if s := check(t, c, global.WithHits(0)).String(); s != "allowed" {
		t.Errorf("a peek: %q", s)
	}
}

func TestDescriptorBuilderCopies(t *testing.T) {
	base := client.NewDescriptor("path", "/orders")
	a := base.With("user", "alice")
	b := base.With("user", "bob")
	if got := a.String(); got != "path=/orders, user=alice" {
		t.Errorf("a = %q", got)
	}
	if got := b.String(); got != "path=/orders, user=bob" {
		t.Errorf("b = %q (sharing a's entries?)", got)
	}
	if got := base.String(); got != "path=/orders" {
		t.Errorf("base = %q, changed by With", got)
	}
	if got := (client.Descriptor{}).String(); got != "" {
		t.Errorf("zero = %q", got)
	}
}

// fakeService answers ShouldRateLimit with whatever answer returns.
type fakeService struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
	answer func(ctx context.Context) (*ratelimitv1.ShouldRateLimitResponse, error)
}

func (f *fakeService) ShouldRateLimit(ctx context.Context, _ *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	return f.answer(ctx)
}

func serveFake(t *testing.T, answer func(ctx context.Context) (*ratelimitv1.ShouldRateLimitResponse, error)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	ratelimitv1.RegisterRateLimitServiceServer(s, &fakeService{answer: answer})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// hook records the failure hook's calls.
type hook struct {
	mu    sync.Mutex
	errs  []error
	decis []client.Decision
}

func (h *hook) option() client.Option {
	return client.WithFailureHook(func(err error, d client.Decision) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.errs = append(h.errs, err)
		h.decis = append(h.decis, d)
	})
}

func TestFailurePolicy(t *testing.T) {
	type service struct {
		name string
		// start returns a target whose service cannot decide.
		start    func(t *testing.T) string
		ask      []client.Descriptor
		timeout  time.Duration
		wantCode codes.Code
	}
	services := []service{
		{
			name: "daemon stopped",
			start: func(t *testing.T) string {
				d := daemontest.Start(t, "")
				d.Stop()
				return d.GRPCAddr()
			},
			ask:      []client.Descriptor{global},
			timeout:  10 * time.Second,
			wantCode: codes.Unavailable,
		},
		{
			name: "service slower than the timeout",
			start: func(t *testing.T) string {
				return serveFake(t, func(ctx context.Context) (*ratelimitv1.ShouldRateLimitResponse, error) {
					<-ctx.Done() // never answers in time
					return nil, ctx.Err()
				})
			},
			ask:      []client.Descriptor{global},
			timeout:  50 * time.Millisecond,
			wantCode: codes.DeadlineExceeded,
		},
		{
			name: "request rejected as invalid",
			start: func(t *testing.T) string {
				return daemontest.Start(t, "").GRPCAddr()
			},
			ask:      []client.Descriptor{{}}, // no entries
			timeout:  10 * time.Second,
			wantCode: codes.InvalidArgument,
		},
	}
	policies := []struct {
		name        string
		opts        []client.Option
		wantAllowed bool
		wantSource  client.Source
		wantRetry   time.Duration
		wantMessage string
	}{
		{"fail open by default", nil, true, client.SourceFailOpen, 0,
			"allowed: rate limit service unavailable, failing open"},
		{"fail closed", []client.Option{client.WithFailClosed(2 * time.Second)}, false, client.SourceFailClosed, 2 * time.Second,
			"rate limit service unavailable, failing closed; retry after 2 s"},
		{"fail closed, default wait", []client.Option{client.WithFailClosed(0)}, false, client.SourceFailClosed, time.Second,
			"rate limit service unavailable, failing closed; retry after 1 s"},
		{"fail open after fail closed", []client.Option{client.WithFailClosed(0), client.WithFailOpen()}, true, client.SourceFailOpen, 0,
			"allowed: rate limit service unavailable, failing open"},
	}
	for _, svc := range services {
		for _, p := range policies {
			t.Run(svc.name+"/"+p.name, func(t *testing.T) {
				target := svc.start(t)
				var h hook
				opts := append([]client.Option{h.option()}, p.opts...)
				c := newClient(t, target, append(opts, client.WithTimeout(svc.timeout))...)
				got, err := c.Charge(context.Background(), "default", svc.ask...)
				if err != nil {
					t.Fatalf("Charge returned an error: %v; a failure is a decision", err)
				}
				if got.Allowed != p.wantAllowed || got.Source != p.wantSource || got.RetryAfter != p.wantRetry {
					t.Errorf("decision %+v, want allowed=%v source=%v retry=%v", got, p.wantAllowed, p.wantSource, p.wantRetry)
				}
				if code := status.Code(got.Err); code != svc.wantCode {
					t.Errorf("Err %v, want code %v", got.Err, svc.wantCode)
				}
				if s := got.String(); s != p.wantMessage {
					t.Errorf("String() = %q, want %q", s, p.wantMessage)
				}
				h.mu.Lock()
				defer h.mu.Unlock()
				if len(h.errs) != 1 || h.errs[0] != got.Err || h.decis[0].Source != got.Source {
					t.Errorf("hook saw %v %v, want the one failure", h.errs, h.decis)
				}
			})
		}
	}
}

func TestCheckReturnsTheCallersContextError(t *testing.T) {
	blocked := make(chan struct{})
	target := serveFake(t, func(ctx context.Context) (*ratelimitv1.ShouldRateLimitResponse, error) {
		close(blocked)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	var h hook
	c := newClient(t, target, h.option(), client.WithFailClosed(0))

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-blocked; cancel() }()
	if _, err := c.Charge(ctx, "default", global); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled mid-call: err %v, want context.Canceled", err)
	}
	if _, err := c.Charge(ctx, "default", global); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before the call: err %v, want context.Canceled", err)
	}
	if len(h.errs) != 0 {
		t.Errorf("the failure hook saw %v; a caller going away is not a failure", h.errs)
	}
}

// logRecords collects log records.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

func TestFailuresAreLoggedAtStateChangesOnly(t *testing.T) {
	var down atomic.Bool
	target := serveFake(t, func(context.Context) (*ratelimitv1.ShouldRateLimitResponse, error) {
		if down.Load() {
			return nil, status.Error(codes.Unavailable, "store down")
		}
		return &ratelimitv1.ShouldRateLimitResponse{OverallCode: ratelimitv1.Code_CODE_OK}, nil
	})
	var logs logRecords
	c := newClient(t, target, client.WithLogger(slog.New(&logs)))
	for _, isDown := range []bool{false, true, true, true, false, false, true} {
		down.Store(isDown)
		check(t, c, global)
	}
	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelWarn, "ratelimit: service cannot decide; applying the failure policy"},
		{slog.LevelInfo, "ratelimit: service answering again"},
		{slog.LevelWarn, "ratelimit: service cannot decide; applying the failure policy"},
	}
	if len(logs.recs) != len(want) {
		t.Fatalf("%d log records, want %d: %v", len(logs.recs), len(want), logs.recs)
	}
	for i, w := range want {
		if r := logs.recs[i]; r.Level != w.level || r.Message != w.msg {
			t.Errorf("record %d: %v %q, want %v %q", i, r.Level, r.Message, w.level, w.msg)
		}
	}
	var failures int64
	logs.recs[1].Attrs(func(a slog.Attr) bool {
		if a.Key == "failures" {
			failures = a.Value.Int64()
		}
		return true
	})
	if failures != 3 {
		t.Errorf("recovery record counts %d failures, want 3", failures)
	}
}

func TestLocalDeny(t *testing.T) {
	d := daemontest.Start(t, "")
	clk := fakeclock.New(daemontest.T0)
	var rpcs calls
	c := newClient(t, d.GRPCAddr(), client.WithLocalDeny(100), client.WithClock(clk), rpcs.option())

	check(t, c, alice.WithHits(800)) // alice's bucket is empty: 100ms a token
	denied := check(t, c, global, orders, alice)
	if denied.Source != client.SourceService || denied.RetryAfter != 100*time.Millisecond {
		t.Fatalf("first denial %+v, want the service's, 100ms", denied)
	}

	// Steps on the client's clock (dt) and the daemon's (the daemon's
	// moves ahead so that, asked, it would admit alice: a local denial is
	// then proof that it was not asked).
	request := []client.Descriptor{global, orders, alice}
	steps := []struct {
		name       string
		dt         time.Duration
		domain     string // "" for "default"
		ask        []client.Descriptor
		wantSource client.Source
		wantAllow  bool
		wantRetry  time.Duration
	}{
		{"same request, no call", 0, "", request, client.SourceLocal, false, 100 * time.Millisecond},
		{"what is left of the wait", 30 * time.Millisecond, "", request, client.SourceLocal, false, 70 * time.Millisecond},
		{"an equal request, built anew", 0, "", []client.Descriptor{
			client.NewDescriptor("generic_key", "global").WithHits(1),
			client.NewDescriptor("path", "/orders"),
			client.NewDescriptor("path", "/orders").With("user", "alice"),
		}, client.SourceLocal, false, 70 * time.Millisecond},
		{"the denied descriptor alone is asked", 0, "", []client.Descriptor{alice}, client.SourceService, true, 0},
		{"a higher cost is asked", 0, "", []client.Descriptor{global, orders, alice.WithHits(5)}, client.SourceService, true, 0},
		{"a peek is asked", 0, "", []client.Descriptor{global, orders, alice.WithHits(0)}, client.SourceService, true, 0},
		{"another order is asked", 0, "", []client.Descriptor{alice, orders, global}, client.SourceService, true, 0},
		{"another domain is asked", 0, "other", request, client.SourceService, true, 0},
		{"another user is asked", 0, "", []client.Descriptor{global, orders, bob}, client.SourceService, true, 0},
		{"1ns before the wait ends", 70*time.Millisecond - 1, "", request, client.SourceLocal, false, 1},
		{"when it ends the service is asked", 1, "", request, client.SourceService, true, 0},
	}
	d.Clock.Advance(time.Second)
	for _, s := range steps {
		clk.Advance(s.dt)
		before := rpcs.n.Load()
		domain := cmp.Or(s.domain, "default")
		got, err := c.Charge(context.Background(), domain, s.ask...)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got.Source != s.wantSource || got.Allowed != s.wantAllow || got.RetryAfter != s.wantRetry {
			t.Errorf("%s: %+v, want source %v allowed %v retry %v", s.name, got, s.wantSource, s.wantAllow, s.wantRetry)
		}
		if !got.Allowed && got.Policy != "per-user-per-endpoint" {
			t.Errorf("%s: policy %q", s.name, got.Policy)
		}
		if called := rpcs.n.Load() > before; called != (s.wantSource == client.SourceService) {
			t.Errorf("%s: called the service: %v", s.name, called)
		}
	}
}

func TestLocalDenyIsOffByDefault(t *testing.T) {
	d := daemontest.Start(t, "")
	var rpcs calls
	c := newClient(t, d.GRPCAddr(), rpcs.option())
	check(t, c, alice.WithHits(800))
	for range 3 {
		if got := check(t, c, alice); got.Source != client.SourceService || got.Allowed {
			t.Fatalf("%+v, want a denial by the service", got)
		}
	}
	if n := rpcs.n.Load(); n != 4 {
		t.Errorf("%d calls, want 4", n)
	}
}

func TestLocalDenyLowerCostIsAsked(t *testing.T) {
	d := daemontest.Start(t, "")
	clk := fakeclock.New(daemontest.T0)
	c := newClient(t, d.GRPCAddr(), client.WithLocalDeny(10), client.WithClock(clk))
	check(t, c, alice.WithHits(795))
	if got := check(t, c, alice.WithHits(10)); got.Source != client.SourceService || got.Allowed {
		t.Fatalf("%+v, want a denial by the service", got)
	}
	if got := check(t, c, alice.WithHits(5)); got.Source != client.SourceService || !got.Allowed {
		t.Fatalf("cost 5 after cost 10 was denied: %+v, want admitted by the service", got)
	}
}

func TestLocalDenyIsBounded(t *testing.T) {
	d := daemontest.Start(t, "")
	clk := fakeclock.New(daemontest.T0)
	var rpcs calls
	c := newClient(t, d.GRPCAddr(), client.WithLocalDeny(2), client.WithClock(clk), rpcs.option())
	// Each user's bucket is emptied, then denied: with room for two, the
	// third denial drops the one that expires first, u1's (u1 is denied for
	// 100ms, u2 and u3 for 200ms, having asked for two tokens).
	for i, u := range []struct {
		name string
		cost uint32
	}{{"u1", 1}, {"u2", 2}, {"u3", 2}} {
		user := orders.With("user", u.name)
		check(t, c, user.WithHits(800))
		if got := check(t, c, user.WithHits(u.cost)); got.Source != client.SourceService || got.Allowed {
			t.Fatalf("user %d: %+v, want a denial by the service", i, got)
		}
	}
	d.Clock.Advance(time.Second) // asked, the service admits each of them
	for _, u := range []struct {
		name string
		cost uint32
		want client.Source
	}{{"u1", 1, client.SourceService}, {"u2", 2, client.SourceLocal}, {"u3", 2, client.SourceLocal}} {
		if got := check(t, c, orders.With("user", u.name).WithHits(u.cost)); got.Source != u.want {
			t.Errorf("%s: source %v, want %v", u.name, got.Source, u.want)
		}
	}
}

// replacesPolicy: one a minute per path, unless the request is a premium
// plan's, whose limit replaces the per-path one.
const replacesPolicy = `
domain: default
descriptors:
  - key: path
    rate_limit: {name: per-path, unit: minute, requests_per_unit: 1}
  - key: plan
    value: premium
    rate_limit:
      name: premium
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per-path}]
`

// The service's verdict on a descriptor depends on the whole request, so
// the short-circuit denies only the request that was denied: a request
// that shares its descriptors is asked, and the service may admit it.
func TestLocalDenyOnlyTheDeniedRequest(t *testing.T) {
	type step struct {
		name       string
		ask        []client.Descriptor
		wantSource client.Source
		wantAllow  bool
		wantRetry  time.Duration
	}
	path := client.NewDescriptor("path", "/a")
	premium := client.NewDescriptor("plan", "premium")
	tests := []struct {
		name       string
		policy     string
		spend      []client.Descriptor // admitted
		denied     []client.Descriptor // then denied by the service
		wantRetry  time.Duration
		wantPolicy string
		steps      []step
	}{
		{
			// tenant: 2 at once, then one every 30s. After one, [tenant,
			// tenant] is one charge of 2 on the one bucket left with 1.
			name:       "the same descriptor twice",
			spend:      []client.Descriptor{tenant},
			denied:     []client.Descriptor{tenant, tenant},
			wantRetry:  30 * time.Second,
			wantPolicy: "tenant-quota",
			steps: []step{
				{"the descriptor once is asked, and admitted", []client.Descriptor{tenant}, client.SourceService, true, 0},
				{"the denied request is denied locally", []client.Descriptor{tenant, tenant}, client.SourceLocal, false, 30 * time.Second},
			},
		},
		{
			name:       "a limit another descriptor's replaces",
			policy:     replacesPolicy,
			spend:      []client.Descriptor{path},
			denied:     []client.Descriptor{path},
			wantRetry:  time.Minute,
			wantPolicy: "per-path",
			steps: []step{
				{"with the premium plan it is asked, and admitted", []client.Descriptor{path, premium}, client.SourceService, true, 0},
				{"the denied request is denied locally", []client.Descriptor{path}, client.SourceLocal, false, time.Minute},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := daemontest.Start(t, tt.policy)
			var rpcs calls
			c := newClient(t, d.GRPCAddr(), client.WithLocalDeny(10), client.WithClock(fakeclock.New(daemontest.T0)), rpcs.option())
			if got := check(t, c, tt.spend...); !got.Allowed {
				t.Fatalf("spending: %v", got)
			}
			got := check(t, c, tt.denied...)
			if got.Allowed || got.Source != client.SourceService || got.RetryAfter != tt.wantRetry || got.Policy != tt.wantPolicy {
				t.Fatalf("%+v, want denied by the service for %v by %q", got, tt.wantRetry, tt.wantPolicy)
			}
			for _, s := range tt.steps {
				before := rpcs.n.Load()
				got := check(t, c, s.ask...)
				if got.Source != s.wantSource || got.Allowed != s.wantAllow || got.RetryAfter != s.wantRetry {
					t.Errorf("%s: %v (%+v), want source %v allowed %v retry %v", s.name, got, got, s.wantSource, s.wantAllow, s.wantRetry)
				}
				if !got.Allowed && got.Policy != tt.wantPolicy {
					t.Errorf("%s: policy %q, want %q", s.name, got.Policy, tt.wantPolicy)
				}
				if called := rpcs.n.Load() > before; called != (s.wantSource == client.SourceService) {
					t.Errorf("%s: called the service: %v", s.name, called)
				}
			}
		})
	}
}

const shadowPolicy = `
domain: default
descriptors:
  - key: path
    shadow_mode: true
    rate_limit: {name: trial, unit: minute, requests_per_unit: 1}
`

func TestLocalDenyIgnoresShadowDenials(t *testing.T) {
	d := daemontest.Start(t, shadowPolicy)
	var rpcs calls
	c := newClient(t, d.GRPCAddr(), client.WithLocalDeny(10), rpcs.option())
	for i := range 3 {
		got := check(t, c, orders)
		if !got.Allowed || got.Source != client.SourceService {
			t.Fatalf("call %d: %+v, want admitted by the service (shadow mode)", i+1, got)
		}
		if st := got.Response.GetStatuses()[0]; i > 0 && (st.GetCode() != ratelimitv1.Code_CODE_OVER_LIMIT || !st.GetShadow()) {
			t.Fatalf("call %d: status %v, want a shadow OVER_LIMIT", i+1, st)
		}
	}
	if n := rpcs.n.Load(); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
}

// WaitReady waits while the service is not there (it never fails for
// that), returns once a connection is up, and fails once the client is
// closed.
func TestWaitReady(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there, for now
	c := newClient(t, addr)

	early, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(early); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady with nothing listening = %v, want the context's deadline", err)
	}

	if lis, err = net.Listen("tcp", addr); err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	ratelimitv1.RegisterRateLimitServiceServer(s, &fakeService{answer: func(context.Context) (*ratelimitv1.ShouldRateLimitResponse, error) {
		return &ratelimitv1.ShouldRateLimitResponse{OverallCode: ratelimitv1.Code_CODE_OVER_LIMIT}, nil
	}})
	go s.Serve(lis)
	defer s.Stop()
	ready, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ready); err != nil {
		t.Fatalf("WaitReady with the service up = %v", err)
	}
	if d := check(t, c, global); d.Allowed {
		t.Errorf("after WaitReady, Check = %+v; want the service's denial, not the failure policy's admission", d)
	}

	c.Close()
	if err := c.WaitReady(ready); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("WaitReady after Close = %v, want an error saying the client is closed", err)
	}
}
