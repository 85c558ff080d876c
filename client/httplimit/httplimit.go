// Package httplimit is net/http middleware that asks ratelimitd about each
// request before its handler runs.
//
//	c, _ := client.New("127.0.0.1:8081")
//	mux := http.NewServeMux()
//	mux.HandleFunc("GET /orders", listOrders)
//	route := httplimit.Pattern(mux)
//	user := httplimit.FirstOf(httplimit.Header("Authorization"), httplimit.ClientAddr())
//	limit := httplimit.New(c, "default", httplimit.Tiers(
//		httplimit.Global(),                     // [generic_key=global]
//		httplimit.PerRoute(route),              // [path=GET /orders]
//		httplimit.PerUserPerRoute(route, user), // [path=GET /orders, user=...]
//	))
//	http.ListenAndServe(addr, limit.Wrap(mux))
//
// What a client sees:
//
//   - Admitted: the handler's response, with RateLimit-Policy and RateLimit
//     headers (below). A request admitted into a leaky_bucket_queue waits
//     its delay first; if its context ends while waiting, the handler does
//     not run and the answer is 503.
//   - Denied: 429 Too Many Requests, the handler not run, with Retry-After
//     in whole seconds rounded up (RFC 9110: "Retry-After: 1" for 120ms),
//     the RateLimit headers, and a plain-text body naming the policy and
//     the wait: "throttled by policy 'per-user-per-endpoint'; retry after
//     120 ms". A request that costs more than a limit's capacity gets no
//     Retry-After: no wait would admit it. With WithTarpit the answer may
//     be held first; it is a 429 even when the request's context ends
//     during the hold.
//   - The service cannot decide: the client's failure policy. Fail open
//     (the default): the handler runs, without RateLimit headers. Fail
//     closed: 503 Service Unavailable with Retry-After and the body "rate
//     limit service unavailable, failing closed; retry after 1 s" — a 503,
//     not a 429, because the client did nothing wrong.
//
// The RateLimit headers are those of the IETF httpapi draft "RateLimit
// header fields for HTTP" (draft 11, structured fields), chosen and written
// as the daemon's Envoy adapter writes them (--response-headers=draft), so
// a client sees the same headers behind Envoy or behind this middleware.
// They describe one limit, the most restrictive of the request
// (client.Decision.MostRestrictive), whose rule a 429's body names: a limit
// the request costs more than, else the denial with the longest wait, else
// the limit with the fewest requests left; on a tie, the first descriptor
// (unmatched descriptors, unlimited and shadow-mode rules never count):
//
//	RateLimit-Policy: "per-user-per-endpoint";q=800;w=80
//	RateLimit: "per-user-per-endpoint";r=799;t=1
//
// q is the capacity (a bucket's burst, or a window's requests) and w the
// seconds an empty bucket or window takes to refill it (capacity × period
// / requests); r is how many requests of cost 1 would be admitted now and
// t the seconds until the bucket is back at rest. Seconds are whole, rounded
// up. The name is the rule's, else the descriptor's entries, else (not
// printable ASCII) "default". A local denial (client.WithLocalDeny) has
// only RateLimit, with r=0 and t its Retry-After. Decisions of the failure
// policy have neither.
//
// NewConcurrency's middleware limits requests in flight instead (a
// policy's algorithm: concurrency): each request holds units while its
// handler runs, released when it returns, panics and cancelled requests
// included. Wrap it in New's to limit requests by rate and in flight.
package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/quota"
	"github.com/ratelimitd/ratelimitd/internal/api/ratelimitheader"
)

// Middleware limits the requests of the handlers it wraps. Make one with
// New; it is safe for concurrent use.
type Middleware struct {
	client   *client.Client
	domain   string
	describe DescribeFunc

	tarpit  time.Duration
	maxHeld int64
	held    atomic.Int64
	quota   *quota.Client // WithQuota

	inFlight bool // NewConcurrency's: Acquire and Release instead of Charge
}

// WithQuota decides each request locally against quota assignments
// (quota.Client.Admit: each descriptor a bucket of q's domain) instead of
// asking the service per request. A denied request gets 429 with the body
// "throttled by quota: <descriptor>", without Retry-After or RateLimit
// headers (a share has no window to report).
func WithQuota(q *quota.Client) Option { return func(m *Middleware) { m.quota = q } }

// An Option configures a Middleware.
type Option func(*Middleware)

// WithTarpit holds each 429 for hold before answering it, for clients that
// retry at once whatever Retry-After says: each such client then has at
// most one request in flight per hold. At most maxHeld answers are held at
// a time (each holds a goroutine and a connection); denials beyond that
// are answered at once. A held answer's Retry-After and body give the wait
// left after the hold (0 when the hold outlasted it). If the request's
// context ends during the hold, the hold ends there and the 429 is written
// at once, with the wait left then: a denied request is never answered
// otherwise. hold <= 0 or maxHeld <= 0 turns the tarpit off, the default.
func WithTarpit(hold time.Duration, maxHeld int) Option {
	return func(m *Middleware) {
		m.tarpit, m.maxHeld = 0, 0
		if hold > 0 && maxHeld > 0 {
			m.tarpit, m.maxHeld = hold, int64(maxHeld)
		}
	}
}

// New returns middleware that checks each request with c in domain, named
// by describe. A request for which describe returns no descriptors goes
// through without a call.
func New(c *client.Client, domain string, describe DescribeFunc, opts ...Option) *Middleware {
	m := &Middleware{client: c, domain: domain, describe: describe}
	for _, o := range opts {
		o(m)
	}
	return m
}

// NewConcurrency returns middleware that holds units in flight with c in
// domain for each request, named by describe, while its handler runs:
// client.Client.Acquire before the handler, Lease.Release once it has
// returned — normally, by a panic, or after the request's context ended
// (the client went away). Name only descriptors of concurrency rules
// (algorithm: concurrency); to limit requests by rate too, wrap this
// middleware in one made by New:
//
//	rate := httplimit.New(c, "default", httplimit.Tiers(httplimit.Global(), httplimit.PerUserPerRoute(route, user)))
//	inFlight := httplimit.NewConcurrency(c, "default", func(r *http.Request) []client.Descriptor {
//		return []client.Descriptor{client.NewDescriptor("tenant", tenantOf(r))}
//	})
//	http.ListenAndServe(addr, rate.Wrap(inFlight.Wrap(mux)))
//
// A client sees what New's middleware shows (see the package
// documentation): an admitted request's RateLimit headers describe the
// concurrency (r units free, once this request's is taken), which replace
// an outer rate middleware's; a denied one gets 429 with them, the body
// naming the rule and Retry-After the service's wait, which is until the
// oldest unit in flight frees itself at its lease's end (a release may free
// one sooner); the failure policy decides when the service cannot, and a
// request it admits holds no unit.
//
// The release is sent after the handler returns and before the response
// is finished, on a context detached from the request's (it is sent even
// when the request's context has ended), within the client's timeout
// (client.WithTimeout): a client that waits for its response before
// sending the next request finds its unit free. A release that cannot
// reach the service does not change the response; the client reports it
// (client.WithReleaseFailureHook, and its log), and the unit frees itself
// at its lease's end. A handler's panic goes on to net/http once the
// release is sent. WithQuota does not apply to this middleware; WithTarpit
// does.
func NewConcurrency(c *client.Client, domain string, describe DescribeFunc, opts ...Option) *Middleware {
	m := New(c, domain, describe, opts...)
	m.quota, m.inFlight = nil, true
	return m
}

// Wrap returns next behind the limit.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ds := m.describe(r)
		if len(ds) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		if m.quota != nil {
			if ok, i := m.quota.Admit(ctx, ds...); !ok {
				http.Error(w, "throttled by quota: "+ds[i].String(), http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		var d client.Decision
		var err error
		if m.inFlight {
			var l *client.Lease
			if l, err = m.client.Acquire(ctx, m.domain, ds...); err == nil {
				// Its error went to the client's hook and log; the unit
				// is left to its lease.
				defer l.Release(context.WithoutCancel(ctx))
				d = l.Decision
			}
		} else {
			d, err = m.client.Charge(ctx, m.domain, ds...)
		}
		if err != nil {
			// The request's context ended: the client is gone or the
			// server's own deadline passed.
			http.Error(w, "request ended before a rate limit decision", http.StatusServiceUnavailable)
			return
		}
		if m.admit(w, r, d, ds) {
			next.ServeHTTP(w, r)
		}
	})
}

// admit reports whether a request decided d may go on to its handler,
// once its queue delay has passed, and answers it otherwise.
func (m *Middleware) admit(w http.ResponseWriter, r *http.Request, d client.Decision, ds []client.Descriptor) bool {
	switch {
	case d.Allowed:
		setRateLimit(w.Header(), d, ds)
		if d.Delay > 0 {
			select {
			case <-m.client.Clock().After(d.Delay):
			case <-r.Context().Done():
				http.Error(w, "request ended while queued by the rate limit", http.StatusServiceUnavailable)
				return false
			}
		}
		return true
	case d.Source == client.SourceFailClosed:
		w.Header().Set(ratelimitheader.RetryAfter, strconv.FormatInt(ratelimitheader.Seconds(d.RetryAfter), 10))
		http.Error(w, d.String(), http.StatusServiceUnavailable)
	default:
		m.deny(w, r, d, ds)
	}
	return false
}

// deny answers 429, after the tarpit's hold when there is one.
func (m *Middleware) deny(w http.ResponseWriter, r *http.Request, d client.Decision, ds []client.Descriptor) {
	if m.tarpit > 0 {
		if m.held.Add(1) <= m.maxHeld {
			clock := m.client.Clock()
			start := clock.Now()
			select {
			case <-clock.After(m.tarpit):
			case <-r.Context().Done():
				// The hold ends early (the client left, or an outer
				// deadline passed), and the request is still denied:
				// writing nothing would let net/http answer 200.
			}
			if !d.Never {
				d.RetryAfter = max(0, d.RetryAfter-clock.Now().Sub(start))
			}
		}
		m.held.Add(-1)
	}
	h := w.Header()
	if !d.Never {
		h.Set(ratelimitheader.RetryAfter, strconv.FormatInt(ratelimitheader.Seconds(d.RetryAfter), 10))
	}
	setRateLimit(h, d, ds)
	http.Error(w, d.String(), http.StatusTooManyRequests)
}
