package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	"github.com/ratelimitd/ratelimitd/internal/testkit/logtest"
)

// t0 is the fake clock's start: a whole second, so that windows align.
var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC).UnixNano()

// remote is a guard.Remote for tests: a memory store on the test's clock
// that can be made to fail, to hang, to refuse the daemon for its
// configuration, and to recover; it counts what the guard asks of it.
type remote struct {
	store *memory.Store

	mu     sync.Mutex
	fail   error // every exchange fails with it (nil: none)
	refuse error // Apply and Check fail with it as a *guard.ConfigError (nil: none)
	hang   bool  // Apply waits until its caller's context ends
	// apply, when set, answers Apply instead of the store.
	apply func(charges []store.Charge, decisions []algorithms.Decision) error

	applies, pings, probes, checks atomic.Int64
}

func (r *remote) state() (fail, refuse error, hang bool, apply func([]store.Charge, []algorithms.Decision) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fail, r.refuse, r.hang, r.apply
}

// set makes every exchange fail with fail, and Apply and Check refuse the
// daemon with refuse (nil, nil: the remote recovers).
func (r *remote) set(fail, refuse error) {
	r.mu.Lock()
	r.fail, r.refuse = fail, refuse
	r.mu.Unlock()
}

func (r *remote) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	r.applies.Add(1)
	fail, refuse, hang, apply := r.state()
	switch {
	case hang:
		<-ctx.Done()
		return fmt.Errorf("remote: %w", ctx.Err())
	case fail != nil:
		return fail
	case refuse != nil:
		return &guard.ConfigError{Err: refuse}
	case apply != nil:
		return apply(charges, decisions)
	}
	return r.store.Apply(ctx, charges, decisions)
}

func (r *remote) Ping(context.Context) error {
	r.pings.Add(1)
	fail, _, _, _ := r.state()
	return fail
}

func (r *remote) Probe(context.Context) error {
	r.probes.Add(1)
	fail, _, _, _ := r.state()
	return fail
}

func (r *remote) Check(context.Context) error {
	r.checks.Add(1)
	fail, refuse, _, _ := r.state()
	if refuse != nil {
		return &guard.ConfigError{Err: refuse}
	}
	return fail
}

// fixture is a Guard around a remote, on a fake clock, logging into log,
// its health reports sent on health.
type fixture struct {
	g      *guard.Guard
	remote *remote
	clock  *clock.Fake
	log    *logtest.Buffer
	health chan bool
}

// newFixture guards a new remote as cfg says (its Name, Clock, Logger and
// OnHealth are the fixture's).
func newFixture(t *testing.T, cfg guard.Config) *fixture {
	t.Helper()
	c := clock.NewFake(t0)
	f := &fixture{remote: &remote{store: memory.New(c)}, clock: c, log: &logtest.Buffer{}, health: make(chan bool, 16)}
	cfg.Name, cfg.Clock = "remote", c
	cfg.Logger = slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.OnHealth = func(up bool, _ error) { f.health <- up }
	g, err := guard.New(f.remote, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	f.g = g
	return f
}

// apply sends charges through the guard and returns its decisions.
func (f *fixture) apply(t *testing.T, charges ...store.Charge) []algorithms.Decision {
	t.Helper()
	d := make([]algorithms.Decision, len(charges))
	if err := f.g.Apply(context.Background(), charges, d); err != nil {
		t.Fatalf("Apply: %v, want no error (the guard decides)", err)
	}
	return d
}

// wantHealth waits for the guard's next health report and fails unless it
// says up.
func (f *fixture) wantHealth(t *testing.T, up bool) {
	t.Helper()
	select {
	case got := <-f.health:
		if got != up {
			t.Fatalf("health reported up=%v, want %v", got, up)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no health report; want up=%v", up)
	}
}

// logged returns how many of the guard's log lines hold s.
func (f *fixture) logged(s string) int { return strings.Count(f.log.String(), s) }

// metrics returns the guard's metrics by name and labels
// ("ratelimitd_remote_up{failure_mode=open}").
func (f *fixture) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.g.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]float64)
	for _, fam := range families {
		for _, s := range fam.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			name := fam.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			if c := s.GetCounter(); c != nil {
				m[name] = c.GetValue()
			} else {
				m[name] = s.GetGauge().GetValue()
			}
		}
	}
	return m
}

func limit(t *testing.T, alg algorithms.Algorithm, requests int64, period time.Duration, burst int64) *algorithms.Limit {
	t.Helper()
	l, err := algorithms.NewLimit(alg, requests, period, burst)
	if err != nil {
		t.Fatal(err)
	}
	return &l
}

func charge(l *algorithms.Limit, key string, cost int64, kind algorithms.Kind) store.Charge {
	return store.Charge{Domain: "shop", Key: []byte(key), Limit: l, Cost: cost, Kind: kind}
}

var errDown = errors.New("connection refused")

// TestFailureModes: while the remote fails, each charge is decided by the
// failure mode, as a user sees it: open admits as on a bucket at rest
// (what a cost over the capacity never is), closed denies every charge and
// check for FailClosedRetryAfter and allows peeks and refunds; nothing is
// recorded, so once the remote is back its buckets are as they were. The
// guard reports down and up again, logs both, and its metrics say so.
func TestFailureModes(t *testing.T) {
	type want struct {
		code       algorithms.Code
		remaining  int64
		retryAfter time.Duration
	}
	denied := want{algorithms.Denied, 0, guard.FailClosedRetryAfter}
	tests := []struct {
		kind algorithms.Kind
		cost int64
		open want
		shut want
	}{
		{algorithms.Admit, 1, want{algorithms.Allowed, 4, 0}, denied},
		{algorithms.Admit, 5, want{algorithms.Allowed, 0, 0}, denied},
		{algorithms.Admit, 6, want{algorithms.OverCapacity, 5, 0}, want{algorithms.OverCapacity, 0, 0}},
		{algorithms.Admit, 0, want{algorithms.Allowed, 5, 0}, want{algorithms.Allowed, 0, 0}}, // a peek
		{algorithms.Check, 0, want{algorithms.Allowed, 5, 0}, denied},
		{algorithms.Overdraft, 3, want{algorithms.Allowed, 2, 0}, denied},
		{algorithms.Refund, 2, want{algorithms.Allowed, 5, 0}, want{algorithms.Allowed, 0, 0}},
	}
	for _, mode := range []guard.FailureMode{guard.FailOpen, guard.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, guard.Config{FailureMode: mode, BreakerFailures: 1000})
			l := limit(t, algorithms.TokenBucket, 5, time.Second, 5)
			f.remote.set(errDown, nil)
			for i, tt := range tests {
				w := tt.open
				if mode == guard.FailClosed {
					w = tt.shut
				}
				d := f.apply(t, charge(l, "k", tt.cost, tt.kind))[0]
				if d.Code != w.code || d.Remaining != w.remaining || d.RetryAfter != w.retryAfter {
					t.Errorf("%d: %v of %d while the remote fails: %+v, want %v, %d remaining, retry after %v",
						i, tt.kind, tt.cost, d, w.code, w.remaining, w.retryAfter)
				}
			}
			f.wantHealth(t, false)
			if up, why := f.g.Healthy(); up || why != errDown.Error() {
				t.Errorf("Healthy() = %v, %q; want false, %q", up, why, errDown)
			}
			m := f.metrics(t)
			if up, fb := m["ratelimitd_remote_up{failure_mode="+mode.String()+"}"], m["ratelimitd_remote_fallback_decisions_total"]; up != 0 || fb != float64(len(tests)) {
				t.Errorf("metrics: up %v, fallback decisions %v; want 0, %d", up, fb, len(tests))
			}
			if n := f.logged(`msg="remote failed; deciding by the failure mode" failure_mode=` + mode.String() + ` err="connection refused"`); n != 1 {
				t.Errorf("%d log lines say the remote failed, want 1:\n%s", n, f.log)
			}

			f.remote.set(nil, nil)
			if d := f.apply(t, charge(l, "k", 1, algorithms.Admit))[0]; d.Code != algorithms.Allowed || d.Remaining != 4 {
				t.Errorf("the first charge once the remote is back: %+v, want admitted with 4 of 5 left (nothing recorded meanwhile)", d)
			}
			f.wantHealth(t, true)
			if up, why := f.g.Healthy(); !up || why != "" {
				t.Errorf("Healthy() = %v, %q once the remote answers; want true", up, why)
			}
			if n := f.logged(`msg="remote is reachable again; deciding from remote"`); n != 1 {
				t.Errorf("%d log lines say the remote is back, want 1:\n%s", n, f.log)
			}
			if up := f.metrics(t)["ratelimitd_remote_up{failure_mode="+mode.String()+"}"]; up != 1 {
				t.Errorf("metric up %v once the remote answers, want 1", up)
			}
		})
	}
}

// TestBreaker: on the guard's clock, BreakerFailures failures in a row
// open the breaker; requests are then decided at once without asking the
// remote until the cool-off has passed; then one request probes: its
// failure opens the breaker again, its success closes it. Each transition
// is logged and counted, and an open breaker shows in Healthy.
func TestBreaker(t *testing.T) {
	f := newFixture(t, guard.Config{FailureMode: guard.FailClosed, BreakerFailures: 3, BreakerCooloff: time.Second})
	l := limit(t, algorithms.TokenBucket, 5, time.Second, 5)
	req := func() algorithms.Decision { return f.apply(t, charge(l, "k", 1, algorithms.Admit))[0] }
	f.remote.set(errDown, nil)
	steps := []struct {
		what    string
		advance time.Duration
		recover bool
		asked   int64 // the remote's Apply calls so far
		state   guard.BreakerState
		code    algorithms.Code
	}{
		{"first failure", 0, false, 1, guard.BreakerClosed, algorithms.Denied},
		{"second failure", 0, false, 2, guard.BreakerClosed, algorithms.Denied},
		{"third failure opens the breaker", 0, false, 3, guard.BreakerOpen, algorithms.Denied},
		{"open: not asked", 500 * time.Millisecond, false, 3, guard.BreakerOpen, algorithms.Denied},
		{"open until the cool-off has passed", 499 * time.Millisecond, false, 3, guard.BreakerOpen, algorithms.Denied},
		{"the probe fails: open again", time.Millisecond, false, 4, guard.BreakerOpen, algorithms.Denied},
		{"open for another cool-off", 999 * time.Millisecond, true, 4, guard.BreakerOpen, algorithms.Denied},
		{"the probe succeeds: closed", time.Millisecond, true, 5, guard.BreakerClosed, algorithms.Allowed},
		{"closed: asked", 0, true, 6, guard.BreakerClosed, algorithms.Allowed},
	}
	for _, st := range steps {
		f.clock.Advance(st.advance)
		if st.recover {
			f.remote.set(nil, nil)
		}
		d := req()
		if got := f.remote.applies.Load(); got != st.asked || f.g.Breaker() != st.state || d.Code != st.code {
			t.Fatalf("%s: remote asked %d times, breaker %v, decision %v; want %d, %v, %v", st.what, got, f.g.Breaker(), d.Code, st.asked, st.state, st.code)
		}
		if st.state == guard.BreakerOpen {
			if up, why := f.g.Healthy(); up || !strings.HasPrefix(why, "circuit breaker open: ") {
				t.Fatalf("%s: Healthy() = %v, %q; want down, saying the breaker is open", st.what, up, why)
			}
		}
	}
	m := f.metrics(t)
	for name, want := range map[string]float64{
		"ratelimitd_remote_breaker_state":                           0,
		"ratelimitd_remote_breaker_transitions_total{to=open}":      2,
		"ratelimitd_remote_breaker_transitions_total{to=half_open}": 2,
		"ratelimitd_remote_breaker_transitions_total{to=closed}":    1,
		"ratelimitd_remote_breaker_open_decisions_total":            3,
		"ratelimitd_remote_fallback_decisions_total":                7,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	for line, want := range map[string]int{
		`level=WARN msg="remote circuit breaker open: deciding by the failure mode without asking remote" failure_mode=closed cooloff=1s failures_in_a_row=3`: 1,
		`level=DEBUG msg="remote circuit breaker half open: probing remote"`:                                                                                  2,
		`level=INFO msg="remote circuit breaker closed: deciding from remote" was=half_open open_for=2s`:                                                      1,
	} {
		if n := f.logged(line); n != want {
			t.Errorf("%d log lines %q, want %d:\n%s", n, line, want, f.log)
		}
	}
}

// TestBreakerReminder: a breaker that stays open (every probe failing,
// once a cool-off) logs that it opened, then that it is still open at most
// once a minute on the guard's clock, with how long and how many probes
// failed since the last line.
func TestBreakerReminder(t *testing.T) {
	f := newFixture(t, guard.Config{BreakerFailures: 1, BreakerCooloff: 10 * time.Second})
	l := limit(t, algorithms.TokenBucket, 5, time.Second, 5)
	f.remote.set(errDown, nil)
	f.apply(t, charge(l, "k", 1, algorithms.Admit)) // opens the breaker
	still := `msg="remote circuit breaker still open: deciding by the failure mode without asking remote" failure_mode=open`
	for i := range 12 { // a probe every 10s for 2 minutes
		f.clock.Advance(10 * time.Second)
		f.apply(t, charge(l, "k", 1, algorithms.Admit))
		want := (i + 1) / 6 // after 60s and 120s
		if n := f.logged(still); n != want {
			t.Fatalf("after %ds: %d reminders, want %d:\n%s", 10*(i+1), n, want, f.log)
		}
	}
	for _, r := range []string{" open_for=1m0s probes_failed=6", " open_for=2m0s probes_failed=6"} {
		if !strings.Contains(f.log.String(), still+r) {
			t.Errorf("no reminder says%s (how long, and the probes failed since the last line):\n%s", r, f.log)
		}
	}
	if n := f.logged("remote circuit breaker open:"); n != 1 {
		t.Errorf("%d log lines say the breaker opened, want 1", n)
	}
}

// TestPingRecoversWithoutTraffic: with the breaker open and no request,
// Ping asks nothing until the cool-off has passed, then probes the remote
// (Remote.Probe, not Ping): a failed probe keeps it open, a successful one
// closes it and marks the guard up.
func TestPingRecoversWithoutTraffic(t *testing.T) {
	f := newFixture(t, guard.Config{BreakerFailures: 2, BreakerCooloff: time.Second})
	ctx := context.Background()
	f.remote.set(errDown, nil)
	for range 2 {
		if err := f.g.Ping(ctx); !errors.Is(err, errDown) {
			t.Fatalf("Ping: %v, want the remote's failure", err)
		}
	}
	f.wantHealth(t, false)
	if f.g.Breaker() != guard.BreakerOpen || f.remote.pings.Load() != 2 {
		t.Fatalf("after two failed pings: breaker %v, %d pings; want open, 2", f.g.Breaker(), f.remote.pings.Load())
	}
	f.remote.set(nil, nil)
	if err := f.g.Ping(ctx); err == nil || !strings.Contains(err.Error(), "cooling off") || f.remote.probes.Load() != 0 {
		t.Fatalf("Ping while cooling off: %v, %d probes; want a cooling-off error and none", err, f.remote.probes.Load())
	}
	f.clock.Advance(time.Second)
	if err := f.g.Ping(ctx); err != nil || f.remote.probes.Load() != 1 || f.remote.pings.Load() != 2 {
		t.Fatalf("Ping after the cool-off: %v, %d probes, %d pings; want nil, 1 probe, no ping", err, f.remote.probes.Load(), f.remote.pings.Load())
	}
	f.wantHealth(t, true)
	if f.g.Breaker() != guard.BreakerClosed {
		t.Fatalf("breaker %v after a successful probe, want closed", f.g.Breaker())
	}
}

// TestDenyCache: a denial the remote made is remembered until its
// RetryAfter has passed on the guard's clock: the same request meanwhile
// is denied without asking the remote, with the wait that is left; another
// cost, a shadow charge and a refund go to the remote, the refund making
// the guard forget; once the wait is over the remote decides again.
func TestDenyCache(t *testing.T) {
	f := newFixture(t, guard.Config{DenyCache: 10})
	l := limit(t, algorithms.TokenBucket, 1, 10*time.Second, 1)
	admit := func(cost int64) store.Charge { return charge(l, "k", cost, algorithms.Admit) }
	shadow := admit(1)
	shadow.Shadow = true
	steps := []struct {
		what    string
		advance time.Duration
		c       store.Charge
		asked   bool // the remote was asked
		code    algorithms.Code
		retry   time.Duration
	}{
		{"admitted", 0, admit(1), true, algorithms.Allowed, 0},
		{"denied by the remote", 0, admit(1), true, algorithms.Denied, 10 * time.Second},
		{"denied from the cache", 4 * time.Second, admit(1), false, algorithms.Denied, 6 * time.Second},
		{"a check: a cost of 1", 0, charge(l, "k", 0, algorithms.Check), false, algorithms.Denied, 6 * time.Second},
		{"a shadow charge is never answered from the cache", 0, shadow, true, algorithms.Denied, 6 * time.Second},
		{"the wait is over", 6 * time.Second, admit(1), true, algorithms.Allowed, 0},
		{"denied by the remote again", 0, admit(1), true, algorithms.Denied, 10 * time.Second},
		{"a refund reaches the remote", time.Second, charge(l, "k", 1, algorithms.Refund), true, algorithms.Allowed, 0},
		{"and the denial is forgotten", 0, admit(1), true, algorithms.Allowed, 0},
	}
	hits := 0.0
	for _, st := range steps {
		f.clock.Advance(st.advance)
		before := f.remote.applies.Load()
		d := f.apply(t, st.c)[0]
		asked := f.remote.applies.Load() > before
		if asked != st.asked || d.Code != st.code || d.RetryAfter != st.retry {
			t.Fatalf("%s: asked the remote %v, %v retry after %v; want %v, %v, %v", st.what, asked, d.Code, d.RetryAfter, st.asked, st.code, st.retry)
		}
		if !asked {
			hits++
		}
	}
	m := f.metrics(t)
	if m["ratelimitd_remote_deny_cache_hits_total"] != hits || m["ratelimitd_remote_deny_cache_entries"] != 0 {
		t.Errorf("deny cache metrics: %v hits, %v entries; want %v, 0", m["ratelimitd_remote_deny_cache_hits_total"], m["ratelimitd_remote_deny_cache_entries"], hits)
	}
}

// TestMisconfigured: a remote that refuses the daemon for its
// configuration (a *guard.ConfigError) is not an outage: requests are
// decided by the failure mode, the guard says it is misconfigured, logs it
// as an error once and again at most once a minute, and Ping checks
// (Remote.Check) instead of pinging, until a check succeeds: then the
// guard logs that the remote accepts it again and is up.
func TestMisconfigured(t *testing.T) {
	f := newFixture(t, guard.Config{FailureMode: guard.FailClosed, BreakerFailures: 1000})
	ctx := context.Background()
	l := limit(t, algorithms.TokenBucket, 5, time.Second, 5)
	refusal := errors.New("NOPERM this user has no permissions to run the 'evalsha' command")
	f.remote.set(nil, refusal)
	if d := f.apply(t, charge(l, "k", 1, algorithms.Admit))[0]; d.Code != algorithms.Denied || d.RetryAfter != guard.FailClosedRetryAfter {
		t.Errorf("a request while refused: %+v, want denied by the failure mode", d)
	}
	f.wantHealth(t, false)
	if err := f.g.Misconfigured(); !guard.IsConfigError(err) || !errors.Is(err, refusal) {
		t.Errorf("Misconfigured() = %v, want the refusal as a *guard.ConfigError", err)
	}
	if up, why := f.g.Healthy(); up || why != "misconfigured: "+refusal.Error() {
		t.Errorf("Healthy() = %v, %q; want false, misconfigured: ...", up, why)
	}
	refused := `level=ERROR msg="remote refuses the daemon: a configuration error, not an outage; not ready, deciding by the failure mode until it is mended" failure_mode=closed`
	f.clock.Advance(59 * time.Second)
	f.apply(t, charge(l, "k", 1, algorithms.Admit))
	if err := f.g.Ping(ctx); !guard.IsConfigError(err) || f.remote.checks.Load() != 1 || f.remote.pings.Load() != 0 {
		t.Errorf("Ping while refused: %v, %d checks, %d pings; want the refusal, 1 check, no ping", err, f.remote.checks.Load(), f.remote.pings.Load())
	}
	if n := f.logged(refused); n != 1 {
		t.Errorf("%d log lines of the refusal within a minute, want 1:\n%s", n, f.log)
	}
	f.clock.Advance(time.Second)
	f.apply(t, charge(l, "k", 1, algorithms.Admit))
	if n := f.logged(refused); n != 2 {
		t.Errorf("%d log lines of the refusal after a minute, want 2:\n%s", n, f.log)
	}

	f.remote.set(nil, nil)
	if err := f.g.Ping(ctx); err != nil || f.remote.checks.Load() != 2 {
		t.Fatalf("Ping once mended: %v, %d checks; want nil, 2", err, f.remote.checks.Load())
	}
	f.wantHealth(t, true)
	if err := f.g.Misconfigured(); err != nil {
		t.Errorf("Misconfigured() = %v once a check succeeded, want nil", err)
	}
	if n := f.logged(`level=INFO msg="remote accepts the daemon's configuration again"`); n != 1 {
		t.Errorf("%d log lines say the remote accepts the daemon again, want 1:\n%s", n, f.log)
	}
}

// TestNewRefusesBadConfig: a Config that cannot work is refused with an
// error that names what is wrong, as is a failure mode's unknown name.
func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		cfg  guard.Config
		want string
	}{
		{guard.Config{FailureMode: 7}, "unknown failure mode 7"},
		{guard.Config{BreakerFailures: -1}, "breaker failures and cool-off must not be negative"},
		{guard.Config{BreakerCooloff: -time.Second}, "breaker failures and cool-off must not be negative"},
	}
	for _, tt := range tests {
		g, err := guard.New(&remote{}, tt.cfg)
		if err == nil || err.Error() != tt.want {
			if g != nil {
				g.Close()
			}
			t.Errorf("New(%+v): %v, want %q", tt.cfg, err, tt.want)
		}
	}
	var m guard.FailureMode
	if err := m.Set("sideways"); err == nil || !strings.Contains(err.Error(), `"sideways": want open or closed`) {
		t.Errorf(`Set("sideways"): %v, want an error naming it`, err)
	}
	for _, s := range []string{"open", "closed"} {
		if err := m.Set(s); err != nil || m.String() != s {
			t.Errorf("Set(%q): %v, %v", s, err, m)
		}
	}
}

// TestCallerGoneWhileRemoteHangs: a request whose caller goes away while
// the remote has not answered returns the caller's error, counts no
// failure and leaves the health as it was; a probe whose caller went away
// lets the next request probe instead.
func TestCallerGoneWhileRemoteHangs(t *testing.T) {
	f := newFixture(t, guard.Config{BreakerFailures: 1, BreakerCooloff: time.Second})
	l := limit(t, algorithms.TokenBucket, 5, time.Second, 5)
	hangingApply := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		return f.g.Apply(ctx, []store.Charge{charge(l, "k", 1, algorithms.Admit)}, make([]algorithms.Decision, 1))
	}
	f.remote.mu.Lock()
	f.remote.hang = true
	f.remote.mu.Unlock()
	if err := hangingApply(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply with the caller gone: %v, want its context's error", err)
	}
	if up, _ := f.g.Healthy(); !up || f.g.Breaker() != guard.BreakerClosed || f.metrics(t)["ratelimitd_remote_fallback_decisions_total"] != 0 {
		t.Fatalf("after a caller went away: up %v, breaker %v; want up, closed, no fallback", up, f.g.Breaker())
	}

	f.remote.mu.Lock()
	f.remote.hang = false
	f.remote.mu.Unlock()
	f.remote.set(errDown, nil)
	f.apply(t, charge(l, "k", 1, algorithms.Admit)) // opens the breaker
	f.clock.Advance(time.Second)
	f.remote.mu.Lock()
	f.remote.hang = true
	f.remote.mu.Unlock()
	asked := f.remote.applies.Load()
	if err := hangingApply(); !errors.Is(err, context.DeadlineExceeded) || f.remote.applies.Load() != asked+1 {
		t.Fatalf("the probe with its caller gone: %v", err)
	}
	f.remote.mu.Lock()
	f.remote.hang = false
	f.remote.mu.Unlock()
	f.remote.set(nil, nil)
	f.apply(t, charge(l, "k", 1, algorithms.Admit))
	if f.remote.applies.Load() != asked+2 || f.g.Breaker() != guard.BreakerClosed {
		t.Fatalf("the next request: remote asked %d times, breaker %v; want it to probe and close", f.remote.applies.Load()-asked, f.g.Breaker())
	}
}

// TestFailuresAsTheRemoteClassifiesThem: the requests of one failed
// exchange (*guard.SharedFailure) are one failure to the breaker, however
// many; and a request a part of which failed while another part denied it
// (*guard.DeniedElsewhere) keeps the remote's decisions and leaves only
// the failed part to the failure mode, as charges of a denied request.
func TestFailuresAsTheRemoteClassifiesThem(t *testing.T) {
	f := newFixture(t, guard.Config{BreakerFailures: 2})
	l := limit(t, algorithms.TokenBucket, 5, time.Second, 5)
	for exchange := uint64(1); exchange <= 2; exchange++ {
		f.remote.set(&guard.SharedFailure{Err: errDown, Exchange: exchange}, nil)
		for range 5 {
			f.apply(t, charge(l, "k", 1, algorithms.Admit))
		}
		want := guard.BreakerClosed
		if exchange == 2 {
			want = guard.BreakerOpen
		}
		if f.g.Breaker() != want {
			t.Fatalf("after %d failed exchanges of 5 requests each: breaker %v, want %v", exchange, f.g.Breaker(), want)
		}
	}

	f = newFixture(t, guard.Config{FailureMode: guard.FailOpen})
	f.remote.mu.Lock()
	f.remote.apply = func(charges []store.Charge, d []algorithms.Decision) error {
		d[0] = algorithms.Decision{Code: algorithms.Denied, RetryAfter: 3 * time.Second}
		return &guard.DeniedElsewhere{Err: errDown, Failed: []int{1}}
	}
	f.remote.mu.Unlock()
	d := f.apply(t, charge(l, "a", 1, algorithms.Admit), charge(l, "b", 2, algorithms.Admit))
	if d[0].Code != algorithms.Denied || d[0].RetryAfter != 3*time.Second {
		t.Errorf("the part the remote denied: %+v, want its denial kept", d[0])
	}
	if d[1].Code != algorithms.Allowed || d[1].Remaining != 5 {
		t.Errorf("the failed part of a denied request, failing open: %+v, want a peek of a bucket at rest (5 left)", d[1])
	}
	if fb := f.metrics(t)["ratelimitd_remote_fallback_decisions_total"]; fb != 1 {
		t.Errorf("fallback decisions %v, want 1", fb)
	}
}
