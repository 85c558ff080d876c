package authz

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/policy/reload"
)

// Authorizer holds the policy in force, loaded from a file and reloaded
// when it (or a token file) changes, decides calls under it, and counts
// its refusals and reloads. It is safe for concurrent use.
type Authorizer struct {
	path     string
	log      *slog.Logger
	debounce time.Duration
	policy   atomic.Pointer[Policy]

	reloading sync.Mutex // held by Reload
	tried     []string   // files the last load read or tried to; under reloading

	denied  *prometheus.CounterVec
	reloads *prometheus.CounterVec
}

// Option configures an Authorizer.
type Option func(*Authorizer)

// WithLogger sets where reloads are logged (default slog.Default()).
// Refusals are counted, not logged: a caller could flood the log.
func WithLogger(l *slog.Logger) Option { return func(a *Authorizer) { a.log = l } }

// WithDebounce sets the quiet interval of Run's file watcher (default
// reload.DefaultDebounce).
func WithDebounce(d time.Duration) Option { return func(a *Authorizer) { a.debounce = d } }

// New loads the policy file at path (see Load) and returns an Authorizer
// deciding under it, or the policy's problems.
func New(path string, opts ...Option) (*Authorizer, error) {
	a := &Authorizer{
		path:     path,
		log:      slog.Default(),
		debounce: reload.DefaultDebounce,
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_authz_denied_total",
			Help: "Calls refused by the authorization policy, by reason (bad_token, no_credentials, unknown_caller: Unauthenticated; domain, peek_only (a charge without the charge verb), refund (a refund without the refund verb), method: PermissionDenied).",
		}, []string{"reason"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_authz_reloads_total",
			Help: "Reloads of the authorization policy after its files changed or on SIGHUP, by result (success, failure: the previous policy goes on serving).",
		}, []string{"result"}),
	}
	for _, opt := range opts {
		opt(a)
	}
	for _, r := range Reasons {
		a.denied.WithLabelValues(r.String())
	}
	a.reloads.WithLabelValues("success")
	a.reloads.WithLabelValues("failure")
	p, tried, err := load(path)
	if err != nil {
		return nil, err
	}
	a.policy.Store(p)
	a.tried = tried
	return a, nil
}

// Policy returns the policy in force.
func (a *Authorizer) Policy() *Policy { return a.policy.Load() }

// Authorize decides a call under the policy in force (Policy.Authorize),
// counting a refusal by its reason.
func (a *Authorizer) Authorize(id Identity, domain string, access Access) error {
	if e := a.policy.Load().decide(id, domain, access); e != nil {
		a.denied.WithLabelValues(e.Reason.String()).Inc()
		return e
	}
	return nil
}

// refuse counts and returns a refusal made outside the policy.
func (a *Authorizer) refuse(e *Error) error {
	a.denied.WithLabelValues(e.Reason.String()).Inc()
	return e
}

// Collectors returns the Authorizer's metrics, for a registry.
func (a *Authorizer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.denied, a.reloads}
}

// Reload reads the policy file and its token files again. A valid policy
// is put in force for every call decided after Reload returns; an invalid
// one is rejected — Reload logs and returns its problems, counts the
// failure, and the previous policy goes on serving. A policy whose files
// hold the same bytes as the one in force changes nothing and is neither
// logged nor counted. Reloads never run concurrently.
func (a *Authorizer) Reload() error {
	_, err := a.reload()
	return err
}

// reload is Reload, also telling whether the policy in force changed.
func (a *Authorizer) reload() (changed bool, err error) {
	a.reloading.Lock()
	defer a.reloading.Unlock()
	p, tried, err := load(a.path)
	a.tried = tried
	if err != nil {
		a.reloads.WithLabelValues("failure").Inc()
		a.log.Error("authorization policy reload failed; the previous policy goes on serving", "authz_policy", a.path, "error", err)
		return false, err
	}
	if p.sum == a.policy.Load().sum {
		return false, nil
	}
	a.policy.Store(p)
	a.reloads.WithLabelValues("success").Inc()
	a.log.Info("authorization policy reloaded", "authz_policy", a.path, "clients", p.Clients(), "anonymous", p.anonymous != nil)
	return true, nil
}

// watched returns the files to watch: those of the policy in force and
// those the last load tried to read (a token file a rejected policy names
// and that does not exist yet, say).
func (a *Authorizer) watched() []string {
	a.reloading.Lock()
	defer a.reloading.Unlock()
	files := a.policy.Load().Files()
	for _, f := range a.tried {
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	return files
}

// Run reloads the policy (Reload) whenever the policy file or a token file
// changes — edited, replaced, or swapped by a Kubernetes volume's link —
// until ctx is done. When a reload changes which token files the policy
// names, the new ones are watched from then on. Changes made between New
// and Run are seen too.
func (a *Authorizer) Run(ctx context.Context) {
	for ctx.Err() == nil {
		files := a.watched()
		w, err := reload.New(files, reload.WithDebounce(a.debounce))
		if err != nil {
			a.log.Error("cannot watch the authorization policy's files; retrying in 10s", "authz_policy", a.path, "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
			continue
		}
		// Whatever changed before the watch began is read now.
		a.reload()
		if !slices.Equal(files, a.watched()) {
			w.Close()
			continue
		}
		inner, cancel := context.WithCancel(ctx)
		w.Run(inner, func() {
			a.reload()
			if !slices.Equal(files, a.watched()) {
				cancel() // watch the new set of files
			}
		})
		cancel()
	}
}
