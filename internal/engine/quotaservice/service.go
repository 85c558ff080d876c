// Package quotaservice is the quota service: what the daemon does with
// quota clients' usage reports, whatever wire they come on (Envoy's RLQS,
// internal/api/rlqsapi, which translates only). A client reports, for each
// bucket it names (an RLQS BucketId), what it was asked; the service
// matches the bucket to the policy's rule, chooses the limit to divide,
// keeps the clients and their buckets within bounds, divides the limit
// among them (internal/core/quota's Allocator, through a ledger when
// daemons share limits), retires buckets a client stops using, and queues
// each client's answers (Action) for its sender.
//
// It sits at the engine's layer, beside the engine rather than inside
// internal/core/quota: it reads the policy (internal/policy/config) and
// names buckets by the engine's one encoding (engine.BucketKey), while the
// allocator stays pure arithmetic that the Redis store's ledger imports.
// What it counts goes to an Observer (internal/observe/metrics.Quota).
//
// # From a report to a limit
//
// A client serves one domain. A bucket's entries, sorted by key, are a
// descriptor's entries, matched against the domain's rules as a request's
// descriptor is (config.Domain.Match): so any rule can be served by quota,
// with no change to the policy. What the matched rule answers:
//
//   - its limit (of several, the one of the lowest rate; divided by the
//     daemons of WithDaemons): a share of it (Share), divided among the
//     clients reporting the bucket (package quota); a share of 0 is
//     DenyAll;
//   - requests_per_unit 0: DenyAll;
//   - unlimited, shadow mode, or no rule (an unknown domain included):
//     AllowAll, as the per-request APIs allow it.
//
// A bucket of shares is per value, as the per-request buckets are: one per
// distinct entries, except that values a share_threshold wildcard matches
// share one; it is named by engine.BucketKey with the limit's whole Key, so
// a reload that changes a limit's arithmetic starts a new one.
//
// Every answer lives quota.TTL of the client's report interval (the time
// it says elapsed between its reports, at most quota.MaxInterval,
// DefaultInterval until it says), and is renewed in the answer to each
// report, identical while the share holds. When shares change, the
// clients whose shares changed get theirs at once (Tick, or another
// client's report), not at their next report. Policy reloads apply at each
// bucket's next report. A bucket a client reports with nothing asked for
// RetireAfter is answered Abandon, and its share released.
//
// # Bounds
//
// A client may bring MaxClientBuckets buckets of shares into the service's
// table, a tenant MaxTenantBuckets (the caller Open names, else the
// client's domain), all of them MaxBuckets. A bucket beyond any of these is
// answered DenyAll for an answer's life, and the client goes on; the
// refusals are logged (at most a line a minute) and counted. Buckets no
// limit is divided for are answered without the service's lock; the others
// take it one usage at a time. While MaxPending of a client's answers are
// untaken, its next usage waits for them (Client.Report).
package quotaservice

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/core/quota"
	"github.com/ratelimitd/ratelimitd/internal/core/reminder"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// DefaultInterval is the report interval assumed for a client until its
// reports say (Envoy's filter takes it from reporting_interval).
const DefaultInterval = time.Second

// SyncTimeout bounds a Tick's exchange with the ledger.
const SyncTimeout = time.Second

// Service is the quota service. It is safe for concurrent use.
type Service struct {
	policy   func() *config.Policy
	clock    clock.Clock
	interval time.Duration
	observer Observer
	daemons  int64 // each limit is divided by it
	ledger   Ledger
	ticking  sync.Mutex // one Tick at a time, with a ledger
	log      *slog.Logger
	down     *reminder.Reminder // the ledger failing
	full     *reminder.Reminder // buckets refused at a bound

	mu      sync.Mutex // guards alloc, clients, table and each Client's known
	alloc   *quota.Allocator
	clients map[string]*Client
	table   table // by allocator key
	ids     atomic.Uint64
}

// Observer is told what the service does; internal/observe/metrics.Quota
// counts it. Its methods are called with the service's lock held or not,
// and must not call back into the service.
type Observer interface {
	// Reported: a bucket's usage, of domain ("" when the policy does not
	// have it, so that callers cannot make series).
	Reported(domain string)
	// Assigned: an action sent for a bucket of domain (Kind.String).
	Assigned(domain, action string)
	// Refused: a bucket of domain answered DenyAll at a bound.
	Refused(domain string)
	// Synced: n claims sent to the ledger, answered unless err.
	Synced(n int, err error)
}

// Ledger keeps, for daemons that share limits, each one's part of every
// bucket's limit (internal/store/redis: QuotaLedger; quota.Claim and
// quota.Grant say what is asked and answered). Sync answers the claims in
// order, or fails as a whole.
type Ledger interface {
	Sync(ctx context.Context, claims []quota.Claim) ([]quota.Grant, error)
}

// Option configures a Service.
type Option func(*Service)

// WithObserver has o told what the service does.
func WithObserver(o Observer) Option { return func(s *Service) { s.observer = o } }

// WithDaemons divides every limit by n, rounded down, for n daemons that
// serve quota clients for the same limits (n <= 1: the whole limit): the
// shares of all of them together never exceed it, however the clients are
// spread among them, but a daemon whose clients ask for more than its part
// cannot borrow another's unused part.
func WithDaemons(n int) Option { return func(s *Service) { s.daemons = int64(max(n, 1)) } }

// WithLedger shares every limit with the other daemons on the same ledger
// (package quota, "Limits shared by several daemons"): each Tick first
// syncs the buckets whose claims changed, and a bucket's answers are sent
// only while the ledger's grant is in force; the ledger's failures are
// logged (at most one line a minute while they last), and its recovery.
func WithLedger(l Ledger) Option { return func(s *Service) { s.ledger = l } }

// WithInterval sets the report interval assumed for a client until its
// reports say (0: DefaultInterval; at most quota.MaxInterval).
func WithInterval(d time.Duration) Option { return func(s *Service) { s.interval = d } }

// WithLogger has the service log to l (slog.Default without it): the
// ledger's failures and recovery, and buckets refused at a bound.
func WithLogger(l *slog.Logger) Option { return func(s *Service) { s.log = l } }

// New returns a service that maps reports to the policy that policy
// returns (the one in force, read at each report; nil before one arrives),
// on clock's time.
func New(policy func() *config.Policy, clk clock.Clock, opts ...Option) *Service {
	s := &Service{policy: policy, clock: clk, interval: DefaultInterval, daemons: 1, observer: nobody{},
		clients: map[string]*Client{}, table: newTable()}
	for _, o := range opts {
		o(s)
	}
	if s.interval <= 0 {
		s.interval = DefaultInterval
	}
	s.interval = min(s.interval, quota.MaxInterval)
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.observer == nil {
		s.observer = nobody{}
	}
	s.full = reminder.New(clk, 0)
	s.alloc = quota.New(s.interval)
	if s.ledger != nil {
		s.alloc = quota.NewShared(s.interval)
		s.down = reminder.New(clk, 0)
	}
	return s
}

// nobody observes nothing.
type nobody struct{}

func (nobody) Reported(string)         {}
func (nobody) Assigned(string, string) {}
func (nobody) Refused(string)          {}
func (nobody) Synced(int, error)       {}

// Tick rebalances every bucket now and pushes the shares that changed;
// with a ledger, it syncs with the ledger first.
func (s *Service) Tick() {
	if s.ledger != nil {
		// One tick at a time: grants are set in the order the ledger gave
		// them, and shares move on the grants in force, not claims in flight.
		s.ticking.Lock()
		defer s.ticking.Unlock()
		s.sync()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.push(s.alloc.Tick(s.clock.Now()))
	for k := range s.table.buckets { // forget what the allocator forgot
		if !s.alloc.Has(k) {
			s.table.forget(k)
		}
	}
}

// sync sends the allocator's claims to the ledger and gives it the grants.
// The lock is not held while the ledger answers: reports go on meanwhile
// (the claimed buckets' shares do not grow until the grants are in).
func (s *Service) sync() {
	s.mu.Lock()
	claimedAt := s.clock.Now()
	claims := s.alloc.Claims(claimedAt)
	s.mu.Unlock()
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), SyncTimeout)
	grants, err := s.ledger.Sync(ctx, claims)
	cancel()
	s.observer.Synced(len(claims), err)
	if err != nil {
		if log, since, n := s.down.Start(); log {
			s.log.Warn("quota: the ledger of shares is unreachable: shares do not grow, and assignments stop being renewed as their grants run out",
				"for", since, "failures", n, "err", err)
		}
		return
	}
	if log, since := s.down.Stop(); log {
		s.log.Info("quota: the ledger of shares answers again", "after", since)
	}
	s.mu.Lock()
	s.alloc.SetPools(claims, grants, claimedAt)
	s.mu.Unlock()
}

// Fallback returns the domain's quota_fallback (allow for a domain the
// policy does not have).
func (s *Service) Fallback(domain string) config.QuotaFallback {
	if d := s.domain(domain); d != nil {
		return d.QuotaFallback
	}
	return config.QuotaAllow
}

// domain returns the policy's domain of that name, or nil.
func (s *Service) domain(name string) *config.Domain {
	if policy := s.policy(); policy != nil { // nil before an xDS policy arrives
		return policy.Domain(name)
	}
	return nil
}

// BucketView is one bucket served by quota, for the console.
type BucketView struct {
	Domain string            `json:"domain"`
	Bucket map[string]string `json:"bucket_id"`
	Rule   string            `json:"rule"`
	quota.BucketView
	Peers map[string]string `json:"peers"` // client id -> its peer address
}

// View returns the buckets served by quota now, their clients, demands and
// shares.
func (s *Service) View() []BucketView {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var views []BucketView
	for _, b := range s.alloc.View(now) {
		info := s.table.buckets[b.Bucket]
		v := BucketView{Domain: info.domain, Bucket: info.id, Rule: info.rule, BucketView: b, Peers: map[string]string{}}
		for _, c := range b.Clients {
			if cl := s.clients[c.Client]; cl != nil {
				v.Peers[c.Client] = cl.peer
			}
		}
		views = append(views, v)
	}
	return views
}
