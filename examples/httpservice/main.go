// Command httpservice is a small HTTP API behind ratelimitd: every request
// to /orders is checked against the default policy's three tiers (global,
// per route, per user per route) before its handler runs.
//
//	go run ./cmd/ratelimitd &                       # the daemon on 127.0.0.1:8081
//	go run ./examples/httpservice                   # this service on 127.0.0.1:8090
//	curl -i -H 'Authorization: Bearer alice' 127.0.0.1:8090/orders
//
// Alice may send 800 at once, and 10 a second after that (600 a minute):
// once those are spent her requests are answered 429, with Retry-After,
// RateLimit headers and the body "throttled by policy
// 'per-user-per-endpoint'; retry after 100 ms" (with -tarpit, after the
// hold, and with the wait left after it). How many get through first
// depends on how fast they are sent, as the bucket refills meanwhile:
//
//	for i in $(seq 1000); do curl -s -o /dev/null -w '%{http_code}\n' -H 'Authorization: Bearer alice' 127.0.0.1:8090/orders; done | sort | uniq -c
//
// shows some 800 plus 10 for every second the loop took answered 200, the
// rest 429. /healthz and /debug/vars (expvar, with a count of the requests
// ratelimitd could not decide, and of releases that did not reach it) are
// not limited.
//
// GET /reports, work that takes a while, is also limited in flight: each
// request holds the unit [in_flight=reports] while it runs. The default
// policy has no rule for it, so it is not limited there; with a rule such
// as
//
//	descriptors:
//	  - key: in_flight
//	    value: reports
//	    rate_limit: {name: reports-in-flight, algorithm: concurrency, max_in_flight: 4, lease: 5m}
//
// at most 4 reports run at once, and a fifth is answered 429.
package main

import (
	"context"
	"errors"
	"expvar"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/httplimit"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to serve HTTP on")
	target := flag.String("ratelimitd", "127.0.0.1:8081", "ratelimitd's gRPC address")
	domain := flag.String("domain", "default", "the policy domain to ask in")
	failClosed := flag.Bool("fail-closed", false, "deny requests (503) while ratelimitd cannot decide, instead of admitting them")
	tarpit := flag.Duration("tarpit", 0, "hold each 429 this long before answering it (0: off)")
	flag.Parse()

	if err := run(*addr, *target, *domain, *failClosed, *tarpit); err != nil {
		fmt.Fprintln(os.Stderr, "httpservice:", err)
		os.Exit(1)
	}
}

// undecided counts the requests decided by the failure policy; expvar
// serves it at /debug/vars.
var undecided = expvar.NewInt("ratelimit_undecided_requests")

// unreleased counts the units in flight whose release did not reach
// ratelimitd: each frees itself at its lease's end.
var unreleased = expvar.NewInt("ratelimit_unreleased_units")

func run(addr, target, domain string, failClosed bool, tarpit time.Duration) error {
	opts := []client.Option{
		// A decision's budget on this service's hot path. It covers
		// connecting too, which is why run waits for the connection below
		// before it serves.
		client.WithTimeout(50 * time.Millisecond),
		client.WithLocalDeny(10_000),
		// Count the requests ratelimitd could not decide (the client also
		// logs when it stops and starts answering).
		client.WithFailureHook(func(error, client.Decision) { undecided.Add(1) }),
		client.WithReleaseFailureHook(func(error) { unreleased.Add(1) }),
	}
	if failClosed {
		opts = append(opts, client.WithFailClosed(time.Second))
	}
	c, err := client.New(target, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	// Serve once ratelimitd is reachable (or after 5s, then failing open or
	// closed as told): a first request made while the connection is still
	// being set up would not get its answer within 50ms.
	ready, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := c.WaitReady(ready); err != nil {
		slog.Warn("ratelimitd not reachable yet; serving anyway", "ratelimitd", target, "err", err)
	}
	cancel()

	srv := &http.Server{Addr: addr, Handler: newHandler(c, domain, httplimit.WithTarpit(tarpit, 100)), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	slog.Info("httpservice serving", "addr", addr, "ratelimitd", target, "domain", domain)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newHandler is the service: its routes behind the rate limit, and
// /reports behind the limit in flight too.
func newHandler(c *client.Client, domain string, opts ...httplimit.Option) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `[{"id": 1}, {"id": 2}]`)
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "{\"id\": %q}\n", r.PathValue("id"))
	})
	reports := http.NewServeMux()
	reports.HandleFunc("GET /reports", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"report": "orders by day"}`)
	})
	inFlight := httplimit.NewConcurrency(c, domain, func(*http.Request) []client.Descriptor {
		return []client.Descriptor{client.NewDescriptor("in_flight", "reports")}
	}, opts...)
	mux.Handle("GET /reports", inFlight.Wrap(reports))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /debug/vars", expvar.Handler())

	route := httplimit.Pattern(mux) // "GET /orders/{id}", not every id its own route
	user := httplimit.FirstOf(httplimit.Header("Authorization"), httplimit.ClientAddr())
	tiers := httplimit.Tiers(
		httplimit.Global(),
		httplimit.PerRoute(route),
		httplimit.PerUserPerRoute(route, user),
	)
	describe := func(r *http.Request) []client.Descriptor {
		if r.URL.Path == "/healthz" || r.URL.Path == "/debug/vars" {
			return nil // not limited
		}
		return tiers(r)
	}
	limit := httplimit.New(c, domain, describe, opts...)
	return limit.Wrap(mux)
}
