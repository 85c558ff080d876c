package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// DefaultTimeout is the per-call deadline when WithTimeout is not given.
const DefaultTimeout = 100 * time.Millisecond

// DefaultFailClosedRetryAfter is the RetryAfter of a fail-closed denial when
// WithFailClosed is given 0 or less.
const DefaultFailClosedRetryAfter = time.Second

// Client asks a ratelimitd service whether requests may go through. It is
// safe for concurrent use; make one per service address and share it.
type Client struct {
	conn    *grpc.ClientConn
	service ratelimitv1.RateLimitServiceClient

	timeout    time.Duration
	failClosed bool
	closedWait time.Duration
	onFailure  func(error, Decision)
	onRelease  func(error)
	logger     *slog.Logger
	clock      Clock
	local      *localDeny
	dialOpts   []grpc.DialOption

	failures        atomic.Int64 // consecutive failures, for the state-change log
	releaseFailures atomic.Int64 // consecutive undelivered releases, likewise
}

// An Option configures a Client.
type Option func(*Client)

// WithTimeout sets the deadline of each call to the service (default
// DefaultTimeout). A call that takes longer is abandoned and decided by the
// failure policy. A caller's context with an earlier deadline still ends
// the call first, and that is the caller's error, not a failure.
// d <= 0 leaves the default.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithFailOpen admits requests the service could not decide. It is the
// default.
func WithFailOpen() Option {
	return func(c *Client) { c.failClosed = false }
}

// WithFailClosed denies requests the service could not decide, with
// retryAfter as their RetryAfter (DefaultFailClosedRetryAfter when
// retryAfter <= 0).
func WithFailClosed(retryAfter time.Duration) Option {
	return func(c *Client) {
		if retryAfter <= 0 {
			retryAfter = DefaultFailClosedRetryAfter
		}
		c.failClosed, c.closedWait = true, retryAfter
	}
}

// WithFailureHook calls hook for every request the service could not
// decide, with the error and the decision the failure policy made, before
// Charge returns. Count them in a metric here. hook must be safe for
// concurrent use and quick: it runs on the request's path.
func WithFailureHook(hook func(err error, d Decision)) Option {
	return func(c *Client) { c.onFailure = hook }
}

// WithReleaseFailureHook calls hook for every Lease.Release that did not
// reach the service (unreachable, slower than the timeout, an error, or the
// release's context ended), with the error, before Release returns. The
// units of such a release stay in flight until their lease ends. Count
// them in a metric here. hook must be safe for concurrent use and quick.
func WithReleaseFailureHook(hook func(err error)) Option {
	return func(c *Client) { c.onRelease = hook }
}

// WithLogger sets where the client logs (default slog.Default()). It logs
// state changes only, never once per request: a warning at the first
// failure after a success, with the error and the failure policy, and a
// notice when the service answers again, with the number of failures. A
// run of releases that did not reach the service (Lease.Release) is logged
// the same way, apart.
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithLocalDeny turns on the local short-circuit, remembering at most
// maxRequests denied requests (maxRequests <= 0 turns it off, the default).
//
// When the service denies a request with a retry_after R, the same request
// is denied locally, without a call, until R has passed on the client's
// Clock, counted from when the denied call was sent. The same request has
// the same domain and the same descriptors in the same order, each with
// the same entries, cost (WithHits; no WithHits is a cost of 1) and inline
// limit (WithLimit). Such a decision has Source SourceLocal, RetryAfter
// what is left of R, the same Policy, and no Response.
//
// Every other request is asked, even one that names a denied descriptor:
// the service decides a descriptor within its whole request, and retry_after
// speaks of the same request only. The same descriptor twice in a request
// is one bucket charged the summed cost, so [k=v, k=v] may be denied where
// [k=v] is admitted; and a limit that another descriptor's rule replaces
// (the policy's replaces) is not charged at all, so a descriptor denied in
// [X] may be admitted in [X, Y].
//
// Only the service's denials with a retry time are remembered: not Never
// denials (no wait admits them), not decisions of the failure policy.
// Shadow-mode rules never deny, so they never lead to a record. A policy
// change that raises a limit reaches a remembered request only once its R
// has passed.
//
// When maxRequests requests are remembered, recording one more first drops
// the expired ones, then the one that expires first. Memory is a few dozen
// bytes per request plus its descriptors' entries.
func WithLocalDeny(maxRequests int) Option {
	return func(c *Client) {
		c.local = nil
		if maxRequests > 0 {
			c.local = newLocalDeny(maxRequests)
		}
	}
}

// WithClock sets the client's Clock (default the system clock): tests pass
// a fake one.
func WithClock(clk Clock) Option {
	return func(c *Client) {
		if clk != nil {
			c.clock = clk
		}
	}
}

// WithDialOptions adds gRPC dial options, after the client's own (plain
// text transport credentials): a grpc.WithTransportCredentials here
// replaces them, interceptors add to them.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *Client) { c.dialOpts = append(c.dialOpts, opts...) }
}

// New returns a Client of the ratelimitd service at target, in gRPC's
// naming syntax ("127.0.0.1:8081", "dns:///ratelimitd.internal:8081"). It
// starts connecting in the background and returns at once; the connection
// is remade when lost. New fails only for a malformed target or options,
// never because the service is down.
func New(target string, opts ...Option) (*Client, error) {
	c := &Client{
		timeout: DefaultTimeout,
		logger:  slog.Default(),
		clock:   realClock{},
	}
	for _, o := range opts {
		o(c)
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, c.dialOpts...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("ratelimit client for %q: %w", target, err)
	}
	conn.Connect() // so that the first call does not pay for the handshake
	c.conn = conn
	c.service = ratelimitv1.NewRateLimitServiceClient(conn)
	return c, nil
}

// WaitReady waits until the connection to the service is up, or ctx ends,
// and returns ctx's error then. A call's deadline (WithTimeout) covers
// connecting too, so a service that sets a deadline of a few milliseconds
// should wait here before it serves: otherwise its first calls, made while
// the connection is still being set up, are decided by the failure policy.
// WaitReady never fails because the service is down; it keeps waiting.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		s := c.conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			c.conn.Connect()
		case connectivity.Shutdown:
			return errors.New("ratelimit client: closed")
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// Close closes the connection. Calls after Close fail and are decided by
// the failure policy.
func (c *Client) Close() error { return c.conn.Close() }

// Clock returns the client's Clock, for code that waits on its decisions
// (a Decision's Delay) on the same time.
func (c *Client) Clock() Clock { return c.clock }

// Charge asks whether a request named by domain and descriptors may go
// through, and charges it when it may: all descriptors or, when any
// denies, none. Each descriptor costs 1 unless given WithHits, and asks
// what its WithOperation says (a charge unless told; OPERATION_CHECK asks
// without charging).
//
// Charge returns an error only when ctx ends before a decision (the
// caller's deadline or cancellation: the caller is gone, so no failure
// policy applies). Everything else yields a Decision:
//
//   - the service's answer (SourceService);
//   - a local denial (SourceLocal), when WithLocalDeny is on and the
//     service denied the same request earlier, with a retry time that has
//     not yet passed;
//   - when the service cannot decide — unreachable, slower than the
//     timeout, or answering with an error (an invalid request included) —
//     the failure policy's: allowed (SourceFailOpen, the default) or denied
//     for the fail-closed wait (SourceFailClosed), with the cause in Err.
//     Such a decision is reported to the failure hook and, at the change
//     from working to failing, to the log.
func (c *Client) Charge(ctx context.Context, domain string, descriptors ...Descriptor) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	sent := c.clock.Now()
	var key []byte // the request's, for the local short-circuit
	local := c.local != nil && !recordsUsage(descriptors)
	if local {
		key = appendRequestKey(make([]byte, 0, 128), domain, descriptors)
		if wait, policy, ok := c.local.check(sent, key); ok {
			return Decision{Source: SourceLocal, RetryAfter: wait, Policy: policy}, nil
		}
	}
	d, err := c.ask(ctx, domain, descriptors)
	if err == nil && local && d.Source == SourceService && !d.Allowed && !d.Never && d.RetryAfter > 0 {
		c.local.remember(sent, key, d.RetryAfter, d.Policy)
	}
	return d, err
}

// recordsUsage reports whether a descriptor of ds records usage whatever
// the service decides.
func recordsUsage(ds []Descriptor) bool {
	for _, d := range ds {
		if d.recordsUsage() {
			return true
		}
	}
	return false
}

// ask sends a request of domain and descriptors to the service and
// returns its decision, or the failure policy's; an error only when ctx
// ends first.
func (c *Client) ask(ctx context.Context, domain string, descriptors []Descriptor) (Decision, error) {
	resp, err := c.call(ctx, domain, descriptors)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Decision{}, ctxErr
		}
		return c.fail(err), nil
	}
	c.recovered()
	return decide(resp, descriptors), nil
}

// call sends a request of domain and descriptors to the service, within
// the client's timeout, and returns its answer.
func (c *Client) call(ctx context.Context, domain string, descriptors []Descriptor) (*ratelimitv1.ShouldRateLimitResponse, error) {
	req := &ratelimitv1.ShouldRateLimitRequest{
		Domain:      domain,
		Descriptors: make([]*ratelimitv1.Descriptor, len(descriptors)),
	}
	for i, d := range descriptors {
		req.Descriptors[i] = d.proto()
	}
	callCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.service.ShouldRateLimit(callCtx, req)
}

// decide reads the service's answer to a request of ds.
func decide(resp *ratelimitv1.ShouldRateLimitResponse, ds []Descriptor) Decision {
	d := Decision{
		Allowed:  resp.GetOverallCode() != ratelimitv1.Code_CODE_OVER_LIMIT,
		Source:   SourceService,
		Response: resp,
	}
	sts := resp.GetStatuses()
	for _, st := range sts {
		d.Overdrew = d.Overdrew || st.GetOverdrew()
		if !st.GetShadow() {
			d.Debt = max(d.Debt, int64(min(st.GetDebt(), math.MaxInt64)))
		}
	}
	if d.Allowed {
		for _, st := range sts {
			if !st.GetShadow() { // a shadow rule only observes
				d.Delay = max(d.Delay, st.GetDelay().AsDuration())
			}
		}
		return d
	}
	d.RetryAfter = resp.GetRetryAfter().AsDuration()
	if i := d.MostRestrictive(); i >= 0 && sts[i].GetCode() != ratelimitv1.Code_CODE_OK {
		var desc Descriptor
		if i < len(ds) {
			desc = ds[i]
		}
		d.Policy = policyName(sts[i], desc)
		if sts[i].GetCode() == ratelimitv1.Code_CODE_OVER_CAPACITY {
			d.Never, d.RetryAfter = true, 0
		}
	}
	return d
}

// policyName is the name of the rule that decided st, or the descriptor's
// entries when the rule has none.
func policyName(st *ratelimitv1.DescriptorStatus, d Descriptor) string {
	if name := st.GetRule().GetName(); name != "" {
		return name
	}
	return d.String()
}

// fail applies the failure policy to err and reports it.
func (c *Client) fail(err error) Decision {
	d := Decision{Allowed: true, Source: SourceFailOpen, Err: err}
	if c.failClosed {
		d = Decision{Source: SourceFailClosed, RetryAfter: c.closedWait, Err: err}
	}
	if c.failures.Add(1) == 1 {
		c.logger.Warn("ratelimit: service cannot decide; applying the failure policy",
			"policy", d.Source.String(), "code", status.Code(err).String(), "error", err)
	}
	if c.onFailure != nil {
		c.onFailure(err, d)
	}
	return d
}

// recovered notes an answer, logging the end of a run of failures.
func (c *Client) recovered() {
	if c.failures.Load() == 0 {
		return
	}
	if n := c.failures.Swap(0); n > 0 {
		c.logger.Info("ratelimit: service answering again", "failures", n)
	}
}
