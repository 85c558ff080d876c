package httplimit_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/httplimit"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// inFlightPolicy: 2 requests of the API in flight at once, a unit never
// released freed a minute after it was taken; and 3 requests an hour per
// user.
const inFlightPolicy = `
domain: default
descriptors:
  - key: pool
    rate_limit: {name: in-flight, algorithm: concurrency, max_in_flight: 2, lease: 1m}
  - key: user
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 3}
`

// leaseEnd is when the units taken at daemontest.T0 free themselves: a
// minute after the end of T0's 10s slot (lease/6), the slots aligned to
// the Unix epoch, as the algorithms package documents.
var leaseEnd = daemontest.T0.Truncate(10 * time.Second).Add(10*time.Second - 1 + time.Minute)

var apiPool = client.NewDescriptor("pool", "api")

// pooled is an HTTP service behind NewConcurrency ([pool=api]), and, with
// rate, behind New's per-user limit ([user=<Authorization>]) in front of it.
type pooled struct {
	*service
	gate     chan struct{} // closed to let /slow handlers return
	entered  chan string   // a handler started: its path
	finished chan string   // the middleware returned: the request's path
	running  atomic.Int64  // handlers running now
	peak     atomic.Int64  // most handlers running at once
	lost     atomic.Int64  // releases that did not reach the service
	cutOff   atomic.Bool   // the client's calls fail while set
}

func startPooled(t *testing.T, rate bool) *pooled {
	t.Helper()
	p := &pooled{gate: make(chan struct{}), entered: make(chan string, 100), finished: make(chan string, 100)}
	p.service = &service{daemon: daemontest.Start(t, inFlightPolicy)}
	p.client = newClient(t, p.daemon.GRPCAddr(), nil,
		client.WithReleaseFailureHook(func(error) { p.lost.Add(1) }),
		client.WithDialOptions(grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if p.cutOff.Load() {
					return status.Error(codes.Unavailable, "cut off")
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})))
	handler := func(w http.ResponseWriter, r *http.Request) {
		n := p.running.Add(1)
		defer p.running.Add(-1)
		for old := p.peak.Load(); n > old && !p.peak.CompareAndSwap(old, n); old = p.peak.Load() {
		}
		p.entered <- r.URL.Path
		switch r.URL.Path {
		case "/slow":
			select {
			case <-p.gate:
			case <-r.Context().Done():
				return
			}
		case "/panic":
			panic("the handler failed")
		}
		io.WriteString(w, "served "+r.URL.Path+"\n")
	}
	var h http.Handler = httplimit.NewConcurrency(p.client, "default", func(*http.Request) []client.Descriptor {
		return []client.Descriptor{apiPool}
	}).Wrap(http.HandlerFunc(handler))
	if rate {
		h = httplimit.New(p.client, "default", func(r *http.Request) []client.Descriptor {
			return []client.Descriptor{client.NewDescriptor("user", r.Header.Get("Authorization"))}
		}).Wrap(h)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { p.finished <- r.URL.Path }()
		h.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics' stacks
	srv.Start()
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// free returns how many units of [pool=api] are free, as the daemon counts
// them (a charge of 0 charges nothing).
func (p *pooled) free(t *testing.T) uint64 {
	t.Helper()
	l, err := p.client.Acquire(context.Background(), "default", apiPool.WithHits(0))
	if err != nil || l.Source != client.SourceService {
		t.Fatalf("peeking at the pool: %v, %v", l, err)
	}
	return l.Response.GetStatuses()[0].GetRemaining()
}

// wait receives from ch, failing the test if nothing comes in 10s (a hang,
// not a timing assertion).
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("still waiting for %s", what)
	}
	panic("unreachable")
}

// TestConcurrencyAdmitsMaxInFlight: of 6 slow requests at once under
// max_in_flight 2, exactly 2 run, the 4 others are denied at once with the
// RateLimit headers and a Retry-After; when the 2 end, their units are
// free again.
func TestConcurrencyAdmitsMaxInFlight(t *testing.T) {
	p := startPooled(t, false)
	responses := make(chan response, 6)
	for range 6 {
		go func() { responses <- <-p.getAsync(t, "/slow", "") }()
	}
	for range 4 {
		got := wait(t, responses, "a denial")
		for k, want := range map[string]string{
			"Retry-After":      "70",
			"RateLimit-Policy": `"in-flight";q=2;w=60`,
			"RateLimit":        `"in-flight";r=0;t=70`,
		} {
			if v := got.header.Get(k); v != want {
				t.Errorf("a denial's %s: %q, want %q", k, v, want)
			}
		}
		if got.status != http.StatusTooManyRequests || got.body != "throttled by policy 'in-flight'; retry after 70 s\n" {
			t.Fatalf("a request beyond the 2 in flight: %d %q, want 429", got.status, got.body)
		}
	}
	wait(t, p.entered, "the first handler")
	wait(t, p.entered, "the second handler")
	if n := p.peak.Load(); n != 2 {
		t.Fatalf("%d handlers ran at once, want 2", n)
	}
	close(p.gate)
	for range 2 {
		if got := wait(t, responses, "an admitted response"); got.status != http.StatusOK || got.header.Get("RateLimit-Policy") != `"in-flight";q=2;w=60` {
			t.Fatalf("an admitted request: %d %q %v", got.status, got.body, got.header)
		}
	}
	if n := p.free(t); n != 2 {
		t.Fatalf("%d units free after both ended, want 2", n)
	}
	if n := p.peak.Load(); n != 2 {
		t.Fatalf("%d handlers ran at once, want 2", n)
	}
}

// TestConcurrencyReleasesOnPanic: a handler that panics gives its unit
// back before net/http ends the connection.
func TestConcurrencyReleasesOnPanic(t *testing.T) {
	p := startPooled(t, false)
	for range 3 { // one more than max_in_flight: a leak would deny the third
		resp, err := http.Get(p.url + "/panic")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("a panicking handler answered %d, want the connection ended", resp.StatusCode)
		}
		if got := wait(t, p.entered, "the handler"); got != "/panic" {
			t.Fatalf("handler %q ran", got)
		}
	}
	if n := p.free(t); n != 2 {
		t.Fatalf("%d units free after 3 panics, want 2", n)
	}
}

// TestConcurrencyReleasesOnCancel: a request whose client goes away gives
// its unit back once its handler returns, though its context has ended.
func TestConcurrencyReleasesOnCancel(t *testing.T) {
	p := startPooled(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/slow", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	wait(t, p.entered, "the handler")
	if n := p.free(t); n != 1 {
		t.Fatalf("%d units free while the request runs, want 1", n)
	}
	cancel()
	if err := wait(t, errc, "the client"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled request: %v", err)
	}
	wait(t, p.finished, "the middleware to return")
	if n := p.free(t); n != 2 {
		t.Fatalf("%d units free after the cancelled request, want 2", n)
	}
}

// TestConcurrencyReleaseLost: a release that cannot reach the daemon does
// not change the response; it is reported, and the unit frees itself at
// its lease's end, not a nanosecond sooner.
func TestConcurrencyReleaseLost(t *testing.T) {
	p := startPooled(t, false)
	responses := p.getAsync(t, "/slow", "")
	wait(t, p.entered, "the handler")
	p.cutOff.Store(true)
	close(p.gate)
	if got := wait(t, responses, "the response"); got.status != http.StatusOK || got.body != "served /slow\n" {
		t.Fatalf("the response of a request whose release was lost: %d %q", got.status, got.body)
	}
	wait(t, p.finished, "the middleware to return")
	p.cutOff.Store(false)
	if n := p.lost.Load(); n != 1 {
		t.Fatalf("%d lost releases reported, want 1", n)
	}
	for _, step := range []struct {
		name string
		at   time.Time
		free uint64
	}{
		{"after the lost release", daemontest.T0.Add(time.Second), 1},
		{"1ns before the lease ends", leaseEnd.Add(-1), 1},
		{"at the lease's end", leaseEnd, 2},
	} {
		p.daemon.Clock.Set(step.at.UnixNano())
		if n := p.free(t); n != step.free {
			t.Fatalf("%s: %d units free, want %d", step.name, n, step.free)
		}
	}
}

// TestConcurrencyBehindRate: a rate middleware in front of the concurrency
// one — each denies with its own rule named, and a request the rate denies
// takes no unit.
func TestConcurrencyBehindRate(t *testing.T) {
	p := startPooled(t, true)
	slow := []<-chan response{p.getAsync(t, "/slow", "alice"), p.getAsync(t, "/slow", "alice")}
	wait(t, p.entered, "alice's first")
	wait(t, p.entered, "alice's second")
	got := p.get(t, "/fast", "alice") // alice's third of 3 an hour, a third in flight
	if got.status != http.StatusTooManyRequests || got.body != "throttled by policy 'in-flight'; retry after 70 s\n" {
		t.Fatalf("a third in flight: %d %q, want 429 by in-flight", got.status, got.body)
	}
	close(p.gate)
	for _, r := range slow {
		if got := wait(t, r, "a slow response"); got.status != http.StatusOK {
			t.Fatalf("alice's slow request: %d %q", got.status, got.body)
		}
	}
	got = p.get(t, "/fast", "alice")
	if got.status != http.StatusTooManyRequests || got.body != "throttled by policy 'per-user'; retry after 2760 s\n" || // at the hour's end
		got.header.Get("RateLimit-Policy") != `"per-user";q=3;w=3600` {
		t.Fatalf("alice's fourth in the hour: %d %q %v, want 429 by per-user", got.status, got.body, got.header)
	}
	if n := p.free(t); n != 2 {
		t.Fatalf("%d units free after the rate's denial, want 2", n)
	}
	if got := p.get(t, "/fast", "bob"); got.status != http.StatusOK || got.header.Get("RateLimit-Policy") != `"in-flight";q=2;w=60` {
		t.Fatalf("bob: %d %q %v", got.status, got.body, got.header)
	}
}
