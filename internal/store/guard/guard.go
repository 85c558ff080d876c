// Package guard wraps a store that lives elsewhere (Redis) with what the
// daemon needs while that store fails: a failure mode that decides instead
// of it, a circuit breaker, a local deny cache, and health.
//
// A Guard is a store.Store. Its Apply asks the remote store and, when the
// remote fails (returns an error while the caller's context has not
// ended), returns no error but decides the request by Config.FailureMode
// (FailOpen: as if every bucket were at rest; FailClosed: every charge
// denied), marks the store down (Healthy, OnHealth) and counts the
// fallback decision. Apply returns an error only when the caller's context
// ends first. A request whose remote exchange failed may still have been
// charged remotely.
//
// The circuit breaker: when Config.BreakerFailures exchanges in a row fail
// (requests or Run's pings), every request is decided by the failure mode
// at once, without asking the remote, for Config.BreakerCooloff on
// Config.Clock; then one request (or Run's ping, as a Probe) probes the
// remote, alone: its success closes the breaker, its failure opens it
// again. A ping's success never closes it.
//
// A remote that refuses the daemon for its configuration (a *ConfigError:
// an ACL without a command, a wrong password) is not an outage, though
// Apply decides its requests by the failure mode all the same: the Guard
// is misconfigured (Misconfigured, Healthy say why), logs it as an error,
// and stays so until Remote.Check succeeds, which Run tries instead of its
// ping while it lasts; a request or ping that succeeds meanwhile does not
// end it (it may not use what is refused).
//
// The deny cache (Config.DenyCache above 0) remembers, per bucket, a
// denial of a non-shadow charge until its RetryAfter has passed, counted on
// Config.Clock from when the request was sent; a request that charges such
// a bucket the same cost meanwhile is denied without asking the remote
// (its other charges reported as a denied request's on buckets at rest).
//
// docs/redis.md describes all of this for the Redis store.
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/reminder"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// Remote is a store that can fail: Apply returns an error when the store
// failed (see DeniedElsewhere, SharedFailure and ConfigError for the
// errors that say more), and Ping, Probe and Check ask whether it answers.
type Remote interface {
	store.Store
	// Ping asks the remote whether it answers, cheaply, within the
	// remote's own timeout.
	Ping(ctx context.Context) error
	// Probe asks the remote to do what a request does, charging nothing:
	// its success shows that requests would succeed.
	Probe(ctx context.Context) error
	// Check does everything a request may do, on data of its own, and
	// returns a *ConfigError if the remote refuses any of it for the
	// configuration.
	Check(ctx context.Context) error
}

// ConfigError is a remote's error when it refuses the daemon for its
// configuration (permissions, credentials, a missing command): waiting
// does not mend it, an operator must.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// IsConfigError reports whether err is, or wraps, a *ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

// DeniedElsewhere is a remote's Apply error when part of a request failed
// while another part denied it: the decisions are made except those of
// charges[i], i in Failed, which the failure mode decides as charges of a
// request that is denied anyway.
type DeniedElsewhere struct {
	Err    error
	Failed []int
}

func (e *DeniedElsewhere) Error() string { return e.Err.Error() }
func (e *DeniedElsewhere) Unwrap() error { return e.Err }

// SharedFailure is a remote's Apply error when one exchange that carried
// several requests failed: the breaker counts the exchange (numbered from
// 1) once, however many requests it carried.
type SharedFailure struct {
	Err      error
	Exchange uint64
}

func (e *SharedFailure) Error() string { return e.Err.Error() }
func (e *SharedFailure) Unwrap() error { return e.Err }

// Config says how a Guard decides while its remote fails.
type Config struct {
	// Name names the remote in log lines ("redis failed; ...") and
	// metrics (ratelimitd_<Name>_up, ...). Empty: "remote".
	Name string
	// FailureMode decides requests while the remote fails (default
	// FailOpen).
	FailureMode FailureMode
	// BreakerFailures is how many exchanges in a row must fail to open
	// the circuit breaker (0: DefaultBreakerFailures); BreakerCooloff how
	// long it then stays open before a request probes again (0:
	// DefaultBreakerCooloff).
	BreakerFailures int
	BreakerCooloff  time.Duration
	// DenyCache is how many buckets the local deny cache remembers (0:
	// no cache).
	DenyCache int
	// OnHealth, if not nil, is told when the health changes: up false with
	// the failure when it goes down, up true and err nil when it is back.
	// The calls are made one at a time on a goroutine of the Guard's, and
	// alternate, the first saying down (a Guard starts up). Changes that
	// come faster than OnHealth returns are coalesced: a short flap may go
	// unreported, but once the health settles, the last call says it (as
	// Healthy does).
	OnHealth func(up bool, err error)
	// Logger receives the state changes (nil: slog.Default()).
	Logger *slog.Logger
	// Clock is the daemon's own clock (nil: clock.NewMonotonic()): the
	// breaker's cool-off, how long the deny cache remembers a denial, and
	// the time at which FailOpen decides.
	Clock clock.Clock
}

// Guard is a Remote guarded as the package doc says. It is safe for
// concurrent use.
type Guard struct {
	remote  Remote
	name    string
	mode    FailureMode
	log     *slog.Logger
	clock   clock.Clock
	cache   *denyCache // nil without
	breaker *breaker

	health  chan struct{} // one slot: the health changed since reportHealth looked
	up      atomic.Bool
	lastErr atomic.Pointer[error] // the last failure
	misconf atomic.Pointer[error] // the refusal, while the remote refuses the daemon
	// misconfLog paces the refusal's log lines: one as it starts, then one
	// a minute while it lasts.
	misconfLog *reminder.Reminder
	onHealth   func(bool, error)
	done       chan struct{}
	closing    sync.Once

	fallbacks atomic.Uint64 // requests decided, wholly or in part, by the failure mode
	cacheHits atomic.Uint64 // requests denied from the deny cache
	open      atomic.Uint64 // requests decided by the failure mode because the breaker was open
}

// New guards remote as cfg says. The Guard starts up, nothing having failed
// yet.
func New(remote Remote, cfg Config) (*Guard, error) {
	if cfg.FailureMode != FailOpen && cfg.FailureMode != FailClosed {
		return nil, fmt.Errorf("unknown failure mode %d", cfg.FailureMode)
	}
	if cfg.BreakerFailures < 0 || cfg.BreakerCooloff < 0 {
		return nil, errors.New("breaker failures and cool-off must not be negative")
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerCooloff == 0 {
		cfg.BreakerCooloff = DefaultBreakerCooloff
	}
	if cfg.Name == "" {
		cfg.Name = "remote"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.NewMonotonic()
	}
	g := &Guard{
		remote:   remote,
		name:     cfg.Name,
		mode:     cfg.FailureMode,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		onHealth: cfg.OnHealth,
		health:   make(chan struct{}, 1),
		done:     make(chan struct{}),

		misconfLog: reminder.New(cfg.Clock, reminder.DefaultInterval),
	}
	g.breaker = newBreaker(cfg.BreakerFailures, cfg.BreakerCooloff, g.logBreaker(cfg))
	if cfg.DenyCache > 0 {
		g.cache = newDenyCache(cfg.DenyCache)
	}
	g.up.Store(true)
	go g.reportHealth()
	return g, nil
}

// logBreaker returns the breaker's hook that logs its transitions. The
// breaker opens again after every failed probe, once per cool-off: a
// warning as it opens, then a reminder a minute while it stays open.
func (g *Guard) logBreaker(cfg Config) func(from, to BreakerState) {
	open := reminder.New(cfg.Clock, reminder.DefaultInterval)
	return func(from, to BreakerState) {
		switch to {
		case BreakerOpen:
			log, since, repeats := open.Start()
			switch {
			case !log:
			case from == BreakerClosed:
				g.log.Warn(g.name+" circuit breaker open: deciding by the failure mode without asking "+g.name,
					"failure_mode", g.mode.String(), "cooloff", cfg.BreakerCooloff, "failures_in_a_row", cfg.BreakerFailures)
			default:
				g.log.Warn(g.name+" circuit breaker still open: deciding by the failure mode without asking "+g.name,
					"failure_mode", g.mode.String(), "open_for", since.Round(time.Second), "probes_failed", repeats)
			}
		case BreakerHalfOpen:
			g.log.Debug(g.name + " circuit breaker half open: probing " + g.name)
		case BreakerClosed:
			_, since := open.Stop()
			g.log.Info(g.name+" circuit breaker closed: deciding from "+g.name, "was", from.String(), "open_for", since.Round(time.Millisecond))
		}
	}
}

// Close stops the Guard's goroutine. It does not close the remote.
func (g *Guard) Close() {
	g.closing.Do(func() { close(g.done) })
}

// Apply implements store.Store, as the package doc describes.
func (g *Guard) Apply(ctx context.Context, charges []store.Charge, decisions []algorithms.Decision) error {
	if len(charges) == 0 {
		return nil
	}
	// The local time before the request is sent: the deny cache counts a
	// denial's RetryAfter from it, as the remote decided no earlier.
	sent := g.clock.Now()
	if g.cache != nil && g.cache.deny(charges, decisions, sent) {
		g.cacheHits.Add(1)
		return nil
	}
	ok, probe := g.breaker.allow(sent)
	if !ok {
		// The breaker is open: decide by the failure mode at once.
		g.open.Add(1)
		g.fallbacks.Add(1)
		g.mode.decide(charges, sent, decisions)
		return nil
	}
	err := g.remote.Apply(ctx, charges, decisions)
	if err != nil && ctx.Err() != nil {
		g.breaker.release(probe)
		return ctx.Err()
	}
	var exchange uint64 // the shared exchange that failed, if one did
	if sf := (*SharedFailure)(nil); errors.As(err, &sf) {
		exchange = sf.Exchange
	}
	g.breaker.done(probe, err, exchange, g.clock.Now())
	if err != nil {
		g.fallbacks.Add(1)
		g.setHealth(err)
		if de := (*DeniedElsewhere)(nil); errors.As(err, &de) {
			g.mode.decideDenied(charges, de.Failed, sent, decisions)
		} else {
			g.mode.decide(charges, sent, decisions)
		}
		return nil
	}
	g.setHealth(nil)
	if g.cache != nil {
		g.cache.remember(charges, decisions, sent)
	}
	return nil
}

// Healthy reports whether the last exchange with the remote succeeded and
// the remote does not refuse the daemon, and if not, why (and the circuit
// breaker's state, when not closed).
func (g *Guard) Healthy() (bool, string) {
	if g.up.Load() {
		return true, ""
	}
	why := "unreachable"
	if e := g.lastErr.Load(); e != nil {
		why = (*e).Error()
	}
	if e := g.misconf.Load(); e != nil {
		why = "misconfigured: " + (*e).Error()
	}
	if st := g.breaker.State(); st != BreakerClosed {
		why = "circuit breaker " + st.String() + ": " + why
	}
	return false, why
}

// Breaker returns the circuit breaker's state.
func (g *Guard) Breaker() BreakerState { return g.breaker.State() }

// Misconfigured returns the remote's refusal of the daemon (a
// *ConfigError), or nil while it has none.
func (g *Guard) Misconfigured() error {
	if e := g.misconf.Load(); e != nil {
		return *e
	}
	return nil
}

// setHealth records how an exchange went (err nil: it succeeded) and, if
// that changed the health, wakes reportHealth. A *ConfigError makes the
// Guard misconfigured until misconfigured(nil).
func (g *Guard) setHealth(err error) {
	if IsConfigError(err) {
		g.misconfigured(err)
	}
	up := err == nil && g.misconf.Load() == nil
	if err != nil {
		last := err // a copy of its own, so that a success allocates nothing
		g.lastErr.Store(&last)
	}
	if g.up.Swap(up) == up {
		return
	}
	select {
	case g.health <- struct{}{}:
	default: // a wake-up is pending: reportHealth will read the health then
	}
}

// misconfigured records the remote's refusal of the daemon (err a
// *ConfigError) or its end (err nil), and logs the change: a refusal as an
// error, again at most once a minute while it lasts.
func (g *Guard) misconfigured(err error) {
	if err == nil {
		if g.misconf.Swap(nil) != nil {
			g.misconfLog.Stop()
			g.log.Info(g.name + " accepts the daemon's configuration again")
		}
		return
	}
	g.misconf.Store(&err)
	if log, _, _ := g.misconfLog.Start(); !log {
		return
	}
	g.log.Error(g.name+" refuses the daemon: a configuration error, not an outage; not ready, deciding by the failure mode until it is mended",
		"failure_mode", g.mode.String(), "err", err)
}

// reportHealth logs the health changes and tells OnHealth, one call at a
// time. Woken by setHealth, it reads the health itself and reports it only
// if it differs from what it reported last: reports alternate, and the
// last is the current health, however concurrent changes raced and
// however long OnHealth took.
func (g *Guard) reportHealth() {
	reported := true // a Guard starts up
	for {
		select {
		case <-g.done:
			return
		case <-g.health:
		}
		up := g.up.Load()
		if up == reported {
			continue
		}
		reported = up
		var err error
		if !up {
			if e := g.lastErr.Load(); e != nil {
				err = *e
			}
			g.log.Warn(g.name+" failed; deciding by the failure mode", "failure_mode", g.mode.String(), "err", err)
		} else {
			g.log.Info(g.name + " is reachable again; deciding from " + g.name)
		}
		if g.onHealth != nil {
			g.onHealth(up, err)
		}
	}
}

// Ping asks the remote whether it answers (Remote.Ping), and marks the
// Guard up or down by the answer. While the remote refuses the daemon, it
// checks instead (Check). While the circuit breaker is open, it
// probes instead (Remote.Probe), once the cool-off has passed, so that
// the Guard recovers without traffic; the probe's success closes the
// breaker and marks the Guard up. Before the cool-off has passed it
// returns an error at once, asking nothing. When ctx ends first, it
// returns ctx's error and leaves the health as it was.
func (g *Guard) Ping(ctx context.Context) error {
	if g.misconf.Load() != nil {
		return g.Check(ctx)
	}
	if g.breaker.State() != BreakerClosed {
		return g.probe(ctx)
	}
	err := g.remote.Ping(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && g.breaker.State() != BreakerClosed {
		return nil // the breaker opened meanwhile: only a probe closes it
	}
	g.breaker.done(false, err, 0, g.clock.Now())
	g.setHealth(err)
	return err
}

// Check runs Remote.Check: its success ends a misconfiguration, closes the
// breaker and marks the Guard up; its failure is a failure as a request's
// (a *ConfigError makes the Guard misconfigured). When ctx ends first, it
// returns ctx's error and leaves the health as it was.
func (g *Guard) Check(ctx context.Context) error {
	err := g.remote.Check(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		g.misconfigured(nil)
	}
	g.breaker.done(false, err, 0, g.clock.Now())
	g.setHealth(err)
	return err
}

// errCoolingOff is Ping's error while the open breaker cools off.
var errCoolingOff = errors.New("circuit breaker open, cooling off")

// probe is Ping's probe of a breaker that is not closed.
func (g *Guard) probe(ctx context.Context) error {
	ok, probe := g.breaker.allow(g.clock.Now())
	if !ok {
		return fmt.Errorf("%s: %w", g.name, errCoolingOff) // or a request is probing
	}
	err := g.remote.Probe(ctx)
	if err != nil && ctx.Err() != nil {
		g.breaker.release(probe)
		return ctx.Err()
	}
	g.breaker.done(probe, err, 0, g.clock.Now())
	g.setHealth(err)
	return err
}

// Run pings the remote at once and then every interval until ctx is done
// (checks it, while it refuses the daemon: see Ping), so that health
// follows the remote even without traffic, and drops expired deny-cache
// entries.
func (g *Guard) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for ctx.Err() == nil {
		g.Ping(ctx)
		if g.cache != nil {
			g.cache.sweep(g.clock.Now())
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
