// Package daemon assembles ratelimitd: the policy, the store, the engine,
// the gRPC server (ratelimit.v1, Envoy's envoy.service.ratelimit.v3 and its
// quota service envoy.service.rate_limit_quota.v3, health, reflection; TLS
// optional) and the HTTP server (health, metrics, admin, and
// both decision APIs as JSON: internal/api/httpapi), and runs them until stopped.
//
// While it runs, the daemon reloads the policy when the files at
// Config.ConfigPath change (Reload), and the TLS files when they change.
// Shutdown drains it.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/authz"
	"github.com/ratelimitd/ratelimitd/internal/api/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcapi"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcdecode"
	"github.com/ratelimitd/ratelimitd/internal/api/httpapi"
	"github.com/ratelimitd/ratelimitd/internal/api/rlqsapi"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/observe/topdenied"
	"github.com/ratelimitd/ratelimitd/internal/observe/tracing"
	"github.com/ratelimitd/ratelimitd/internal/operator/admin"
	"github.com/ratelimitd/ratelimitd/internal/operator/console"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/policy/reload"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/transport/connlimit"
	"github.com/ratelimitd/ratelimitd/internal/transport/readpace"
	"github.com/ratelimitd/ratelimitd/internal/transport/recvlimit"
	"github.com/ratelimitd/ratelimitd/internal/transport/streamlimit"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
)

// Config is what the daemon is started with.
type Config struct {
	// ConfigPath is a policy file or a directory of them; empty for the
	// embedded default policy (or with XDS).
	ConfigPath string
	// XDS, when XDS.Server is set, takes the policy from an xDS control
	// plane instead (internal/policy/xdspolicy; see xds.go): not with ConfigPath
	// or StateFile. Its Logger is the daemon's.
	XDS xdspolicy.Config
	// StartWithoutPolicy, with XDS, decides calls before the first policy
	// arrives, every domain unknown (allowed, unmatched), as upstream's
	// FORCE_START_WITHOUT_INITIAL_CONFIG; otherwise decision calls are
	// refused (Unavailable) until then. Readiness (/readyz, gRPC health)
	// waits for the first policy either way.
	StartWithoutPolicy bool
	// HealthcheckNeedsPolicy makes /healthcheck fail until a policy is in
	// force (upstream's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthcheckNeedsPolicy bool
	// MetricsAddr, when set, also serves the metrics on a listener of
	// their own, at MetricsPath (default /metrics), as upstream's
	// PROMETHEUS_ADDR does.
	MetricsAddr, MetricsPath string
	// UpstreamMetricNames adds envoyproxy/ratelimit's series
	// (metrics.WithUpstreamNames) to ratelimitd's own.
	UpstreamMetricNames bool
	// GRPCAddr and HTTPAddr are listen addresses; port 0 picks a free one.
	GRPCAddr string
	HTTPAddr string
	// AdminAddr, when set, is where the operator's surface is served —
	// /metrics, /policies, the console, /debug/pprof/ — apart from the
	// decision APIs: HTTPAddr then serves the decision APIs as JSON and the
	// probes only. Empty: both on HTTPAddr, which Start refuses with an
	// AuthzPolicy (the operator's surface has no authorization: it would
	// show every tenant's buckets to whoever reaches the decision port).
	AdminAddr string
	// AllowedHosts are the host names (without port) the HTTP ports answer
	// to, besides IP addresses and "localhost" (internal/transport/hostcheck): a
	// request naming another Host is refused, so that a web page cannot
	// reach a daemon through DNS rebinding. "*" allows any.
	AllowedHosts []string
	// Limits bounds what a caller holds before its call is authorized:
	// connections, streams, time and bytes on the way (zero fields:
	// DefaultLimits).
	Limits Limits
	// Store is where buckets live: "memory" (the default, "" too) or
	// "redis", shared by every daemon on the same Redis.
	Store string
	// Redis configures the Redis store (Store "redis"). It decides on Redis
	// TIME, not Clock; its Logger is the daemon's.
	Redis redisstore.Config
	// RedisGuard says how the daemon decides while Redis fails: failure
	// mode, circuit breaker, deny cache (internal/store/guard). Its Name
	// and Logger are set by the daemon.
	RedisGuard guard.Config
	// MaxBuckets bounds the memory store's buckets (0 for
	// memory.DefaultMaxBuckets).
	MaxBuckets int
	// MaxMemory bounds the bytes of the memory store's bucket state, keys
	// included (0 for memory.DefaultMaxBytes; see package memory).
	MaxMemory int64
	// SweepInterval is how often idle buckets are reclaimed (0: 10s).
	SweepInterval time.Duration
	// StateFile, when set, keeps the memory store's buckets across
	// restarts in that file (internal/store/snapshot's format): loaded at start
	// before serving (a missing file starts empty; a bad one is logged,
	// counted, renamed to StateFile.rejected and the store starts empty),
	// written every SnapshotInterval and on shutdown after the last call.
	// The daemon holds the file's lock (snapshot.Lock) while it runs: Start
	// fails when another process holds it. Only for the memory store.
	// Empty: off.
	StateFile string
	// SnapshotInterval is how often the store is written to StateFile
	// (0: DefaultSnapshotInterval, 10s). After a crash, the charges of at
	// most the last interval (and the snapshot then being written) are lost.
	SnapshotInterval time.Duration
	// ShutdownGrace is how long in-flight requests may take to finish on
	// shutdown before they are cut off (0: 10s).
	ShutdownGrace time.Duration
	// ShutdownDelay is how long, on shutdown, the daemon goes on deciding
	// new calls with health already NOT_SERVING, so that load balancers
	// polling health move away before calls are refused (0: none).
	ShutdownDelay time.Duration
	// NearLimitRatio is the per-rule metrics' near-limit ratio, in (0, 1]
	// (0: metrics.DefaultNearLimitRatio, 0.8).
	NearLimitRatio float64
	// MaxDetailedSeries caps the metric series of each detailed_metric
	// rule (0: metrics.DefaultMaxDetailedSeries).
	MaxDetailedSeries int
	// PolicyBounds bounds the policy files at ConfigPath, at start and at
	// every reload (zero value: config.DefaultPolicyBounds).
	PolicyBounds config.PolicyBounds
	// Pprof serves /debug/pprof/ on the HTTP address (never its cmdline).
	Pprof bool
	// NoConsole turns off the web console (/console), which is served on
	// the HTTP address by default.
	NoConsole bool
	// ConsoleValues says how the console's list of the most denied
	// descriptors keeps descriptor values (zero value: as they are).
	ConsoleValues topdenied.Values
	// TLS, when TLS.Cert is set, serves gRPC over TLS, and mutual TLS when
	// TLS.ClientCA is set too. The files are loaded again when they change.
	TLS tlsconfig.Files
	// Bounds limits request sizes (zero value: engine.DefaultBounds).
	Bounds engine.Bounds
	// ShadowMode is global shadow mode (engine.WithShadowMode): no request
	// is denied, on either API.
	ShadowMode bool
	// OverdraftByDefault makes every limit whose policy does not say
	// overdraft: an overdraft limit (engine.WithOverdraftByDefault), for
	// token budgets in policies that cannot say it, as over xDS.
	OverdraftByDefault bool
	// QuotaDaemons is how many daemons without a shared store serve quota
	// (RLQS) streams for the same limits: each hands out shares of limit /
	// QuotaDaemons, rounded down (0: 1). Daemons on one Redis share quota
	// limits through it by demand instead (more than 1 is refused with the
	// redis store).
	QuotaDaemons int
	// ResponseHeaders selects the headers Envoy v3 responses carry (zero
	// value: none).
	ResponseHeaders envoyapi.Headers
	// ResponseDynamicMetadata makes Envoy v3 responses carry
	// dynamic_metadata (envoyapi.WithDynamicMetadata).
	ResponseDynamicMetadata bool
	// AuthzPolicy is an authorization policy file (internal/api/authz): which
	// callers, by client certificate or bearer token, may check, charge or
	// refund in which domains. It and its token files are reloaded when they
	// change and on ReloadAuthz. Empty: no authorization, every caller that
	// can connect may check, charge and refund in every domain.
	AuthzPolicy string
	// Tracing configures OpenTelemetry traces (internal/observe/tracing): off
	// unless it or the standard OTEL_* environment turns them on.
	Tracing tracing.Config
	// UnaryInterceptors run on every unary call after the daemon's own
	// (metrics, the check that the request decoded, authorization), in
	// order: for a program embedding the daemon (auth, tracing) and for
	// tests that hold a call in flight.
	UnaryInterceptors []grpc.UnaryServerInterceptor
	// Clock is the daemon's clock (nil: the real monotonic clock): the
	// memory store's and the engine's decisions, quota assignments and
	// their reports. It is the one way to give the daemon a time; the
	// Redis store keeps Redis's (all daemons on one Redis share it)
	// unless Redis.Clock gives it one, the same way (redis.Config.Clock).
	Clock clock.Clock
	// Logger receives the daemon's logs (nil: slog.Default()).
	Logger *slog.Logger
}

// Daemon is a running ratelimitd.
type Daemon struct {
	cfg         Config
	log         *slog.Logger
	grpc        *grpc.Server
	http        *http.Server
	admin       *http.Server // nil without Config.AdminAddr
	health      *health.Server
	grpcLis     *connlimit.Listener
	httpLis     *connlimit.Listener
	adminLis    *connlimit.Listener  // nil without Config.AdminAddr
	waiting     *recvlimit.Limiter   // gRPC calls waiting for their message
	pacer       *readpace.Pacer      // paces the gRPC connections whose calls waiting were ended
	bodies      *recvlimit.Limiter   // HTTP decision calls' bodies on their way
	longStreams *streamlimit.Limiter // gRPC streams that last as long as their client wants
	engine      *engine.Engine
	quota       *quotaservice.Service
	rlqs        *rlqsapi.Server
	store       storeBackend
	stopJobs    context.CancelFunc
	served      chan error

	metrics     *metrics.Metrics
	topDenied   *topdenied.Tracker
	tls         *tlsconfig.Server   // nil without TLS
	authz       *authz.Authorizer   // nil without Config.AuthzPolicy
	policyWatch *reload.Watcher     // nil with the embedded default policy
	tlsWatch    *reload.Watcher     // nil without TLS
	xds         *xdspolicy.Client   // nil without Config.XDS
	tracer      *tracing.Tracer     // nil with tracing off
	policyIn    chan struct{}       // closed once a policy is in force
	draining    atomic.Bool         // set as Shutdown starts
	metricsLis  *connlimit.Listener // nil without Config.MetricsAddr
	metricsHTTP *http.Server
	loaded      atomic.Pointer[admin.Loaded]
	reloadFail  atomic.Pointer[console.ReloadStatus] // the last failed reload since the last success; nil for none
	reloading   sync.Mutex                           // held by Reload
	ready       chan struct{}                        // closed once the store has its buckets back, before the gRPC port serves

	servingMu    sync.Mutex                                 // guards the two below, and the health they make
	serving      healthpb.HealthCheckResponse_ServingStatus // as setServing last said
	storeRefuses bool                                       // the store refuses the daemon's configuration (followStore)
	drain        chan struct{}                              // closed when new calls start being refused
	shutdown     sync.Once
}

// Start loads the policy (and the TLS files), opens the store, binds both
// listeners and starts serving, with health SERVING. It fails without
// serving anything, and with everything it opened closed again, when the
// configuration, the policy or the TLS files are invalid, the store cannot
// be opened, or an address cannot be bound.
func Start(cfg Config) (*Daemon, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:       cfg,
		log:       cfg.Logger,
		health:    health.NewServer(),
		served:    make(chan error, 4), // gRPC, HTTP, admin, metrics
		metrics:   metrics.New(metrics.WithNearLimitRatio(cfg.NearLimitRatio), metrics.WithMaxDetailedSeries(cfg.MaxDetailedSeries), metrics.WithUpstreamNames(cfg.UpstreamMetricNames)),
		topDenied: topdenied.New(topDeniedCapacity, cfg.ConsoleValues),
		ready:     make(chan struct{}),
		drain:     make(chan struct{}),
		policyIn:  make(chan struct{}),
	}
	// Each step opens what it names; should a later one fail, abort closes
	// what the earlier ones opened.
	for _, step := range []func() error{
		d.watchFiles, // before reading them, so that no change in between is missed
		d.loadPolicy,
		d.loadTLS,
		d.loadAuthz,
		d.openStore,
		d.startTracing,
		d.listen,
	} {
		if err := step(); err != nil {
			d.abort()
			return nil, err
		}
	}
	d.assemble()
	// While the state file loads, the HTTP port answers: /readyz and the
	// health service say NOT_SERVING and decision calls are refused. No
	// decision is made on a store that has not got its buckets back.
	d.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	d.serveHTTP()
	d.restoreBuckets()
	close(d.ready)
	if d.hasPolicy() { // with XDS, once the first policy is in (applyXDS)
		d.setServing(healthpb.HealthCheckResponse_SERVING)
	}
	d.serve()
	d.logServing()
	return d, nil
}

// assemble makes what serves on what Start opened: the engine, the bounds
// on waiting calls and streams, the quota service, the servers.
func (d *Daemon) assemble() {
	cfg := &d.cfg
	d.engine = engine.New(d.loadedPolicy().Policy, d.tracedStore(),
		engine.WithBounds(cfg.Bounds), engine.WithShadowMode(cfg.ShadowMode),
		engine.WithOverdraftByDefault(cfg.OverdraftByDefault), engine.WithObserver(d.observe),
		engine.WithCounterKeys(cfg.Store == "redis" && cfg.Redis.Counters))
	d.waiting = recvlimit.New(cfg.Limits.MaxWaitingStreams, cfg.Limits.MessageTimeout, recvlimit.WithEnded(d.pacer.Strike))
	d.bodies = recvlimit.New(cfg.Limits.MaxWaitingBodies, cfg.Limits.MessageTimeout)
	d.longStreams = d.newLongStreams()
	d.metrics.Registry().MustRegister(d.limitCollectors()...)
	d.quota, d.rlqs = d.newQuota()
	d.grpc = d.grpcServer()
	d.serversHTTP()
}

// logServing logs what the daemon serves, where, and how.
func (d *Daemon) logServing() {
	cfg := &d.cfg
	d.log.Info("ratelimitd serving",
		"grpc", d.grpcLis.Addr().String(), "http", d.httpLis.Addr().String(), "admin", d.AdminAddr(),
		"policy", d.policySource(), "domains", len(d.loadedPolicy().Policy.Domains()),
		"shadow_mode", cfg.ShadowMode, "overdraft_by_default", cfg.OverdraftByDefault, "response_headers", cfg.ResponseHeaders.String(), "response_dynamic_metadata", cfg.ResponseDynamicMetadata,
		"tls", tlsMode(d.tls), "store", d.store.String(), "traces", d.tracingMode())
}

// topDeniedCapacity is how many descriptors the console's top-denied
// tracker counts per stripe (8 stripes of places of ~300 bytes, two
// generations: under 1.5 MB, whatever the traffic).
const topDeniedCapacity = 300

// topDeniedGeneration is how long one generation of the top-denied tracker
// lasts: the console's list covers the last one to two of them.
const topDeniedGeneration = time.Minute

// observe is the engine's observer: the metrics, and the console's
// top-denied tracker.
func (d *Daemon) observe(ctx context.Context, req *engine.Request, resp *engine.Response, took time.Duration) {
	d.metrics.Observe(ctx, req, resp, took)
	d.topDenied.Observe(req, resp)
	if d.tracer != nil {
		d.tracer.Decided(ctx, req, resp)
	}
}

// Check returns the error Start would fail with for cfg's settings alone
// (fields that contradict each other, values out of range), naming the
// flags at fault, before anything is opened; nil when there is none.
// Start can still fail later: on the policy, the TLS files, the store or
// an address.
func (cfg Config) Check() error {
	_, err := cfg.withDefaults()
	return err
}

// withDefaults returns cfg with its zero values replaced by the defaults
// its fields document, or an error naming the first invalid field.
func (cfg Config) withDefaults() (_ Config, err error) {
	cfg.setDefaults()
	if err := cfg.checkSettings(); err != nil {
		return cfg, err
	}
	if cfg.Limits, err = cfg.Limits.withDefaults(); err != nil {
		return cfg, fmt.Errorf("limits: %w", err)
	}
	if cfg.TLS != (tlsconfig.Files{}) && (cfg.TLS.Cert == "" || cfg.TLS.Key == "") {
		return cfg, errors.New("--tls-cert and --tls-key go together, and --tls-client-ca needs them (a client CA alone is not enough)")
	}
	return cfg, nil
}

// setDefaults replaces cfg's zero values by their defaults (but Limits',
// which Limits.withDefaults checks too).
func (cfg *Config) setDefaults() {
	if cfg.Clock == nil {
		cfg.Clock = clock.NewMonotonic()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Bounds == (engine.Bounds{}) {
		cfg.Bounds = engine.DefaultBounds
	}
	if cfg.PolicyBounds == (config.PolicyBounds{}) {
		cfg.PolicyBounds = config.DefaultPolicyBounds
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	if cfg.SnapshotInterval <= 0 {
		cfg.SnapshotInterval = DefaultSnapshotInterval
	}
	if cfg.NearLimitRatio == 0 {
		cfg.NearLimitRatio = metrics.DefaultNearLimitRatio
	}
}

// checkSettings returns the first of cfg's settings (but Limits and TLS)
// out of range or contradicting another, naming the flags at fault.
func (cfg *Config) checkSettings() error {
	if err := cfg.Bounds.Check(); err != nil {
		return fmt.Errorf("request bounds: %w", err)
	}
	if err := cfg.PolicyBounds.Check(); err != nil {
		return err
	}
	if cfg.QuotaDaemons < 0 {
		return fmt.Errorf("--quota-daemons %d: want 1 or more", cfg.QuotaDaemons)
	}
	if cfg.QuotaDaemons > 1 && cfg.Store == "redis" {
		return fmt.Errorf("--quota-daemons %d with --store redis: daemons on one Redis share quota limits through it, by demand; a static division is for daemons without a shared store", cfg.QuotaDaemons)
	}
	if err := cfg.checkXDS(); err != nil {
		return err
	}
	if cfg.StateFile != "" && cfg.Store == "redis" {
		return errors.New("--state-file with --store redis: a state file keeps the memory store's buckets; Redis keeps its own")
	}
	if cfg.StateFile != "" {
		if fi, err := os.Stat(filepath.Dir(cfg.StateFile)); err != nil || !fi.IsDir() {
			return stateFileError(cfg.StateFile, fs.ErrNotExist)
		}
	}
	if !(cfg.NearLimitRatio > 0 && cfg.NearLimitRatio <= 1) {
		return fmt.Errorf("near-limit ratio %v: want a number in (0, 1]", cfg.NearLimitRatio)
	}
	if cfg.AuthzPolicy != "" && cfg.AdminAddr == "" {
		return errors.New("--authz-policy without --admin-addr: an authorization policy covers the decision APIs, not the operator's surface (console, /policies, /metrics, pprof), which shows every tenant's buckets: serve it apart with an admin address (--admin-addr)")
	}
	return nil
}

// watchFiles starts watching the policy files and the TLS files, when
// there are any.
func (d *Daemon) watchFiles() (err error) {
	if d.cfg.ConfigPath != "" {
		if d.policyWatch, err = reload.New([]string{d.cfg.ConfigPath}); err != nil {
			return fmt.Errorf("watching %s: %w", d.cfg.ConfigPath, err)
		}
	}
	if d.cfg.TLS.Cert != "" {
		if d.tlsWatch, err = reload.New(d.cfg.TLS.Paths()); err != nil {
			return fmt.Errorf("watching the TLS files: %w", err)
		}
	}
	return nil
}

// loadPolicy reads the policy at Config.ConfigPath (or takes the embedded
// default) and puts it in force.
func (d *Daemon) loadPolicy() error {
	if d.cfg.XDS.Server != "" {
		return d.awaitXDS()
	}
	defer close(d.policyIn)
	policy := config.Default()
	if d.cfg.ConfigPath != "" {
		var err error
		if policy, err = config.LoadWithin(d.cfg.ConfigPath, d.cfg.PolicyBounds); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) && pe.Path == d.cfg.ConfigPath {
				return fmt.Errorf("--config %s: %w", pe.Path, pe.Err)
			}
			return err
		}
	}
	d.warnPolicy(policy)
	at := time.Now()
	d.metrics.PolicyLoaded(policy, at)
	d.loaded.Store(&admin.Loaded{Policy: policy, Path: d.cfg.ConfigPath, At: at})
	return nil
}

// loadTLS reads the gRPC server's certificate files, when TLS is on.
func (d *Daemon) loadTLS() (err error) {
	if d.cfg.TLS.Cert == "" {
		return nil
	}
	if d.tls, err = tlsconfig.New(d.cfg.TLS); err != nil {
		return err
	}
	d.metrics.CertificateLoaded(false, d.tls.NotAfter(), nil)
	d.warnCertificate()
	return nil
}

// openStore opens the store Config.Store names and adds its metrics.
func (d *Daemon) openStore() (err error) {
	if d.store, err = openStore(d.cfg, d.health); err != nil {
		return err
	}
	d.metrics.Registry().MustRegister(d.store.collectors()...)
	return nil
}

// restoreBuckets brings back the buckets the store kept across the restart
// (the memory store with a state file), only those of limits still in the
// policy with the same kind of state and period (engine.Engine.Adopt). It runs before the gRPC port serves;
// meanwhile the HTTP port answers, with /readyz (and the health service)
// NOT_SERVING and decision calls refused. It cannot fail (a bad file
// starts the store empty).
func (d *Daemon) restoreBuckets() {
	d.store.restore(d.engine.Adopt)
}

// listen binds the gRPC, HTTP, admin and metrics listeners, each holding
// at most Limits.MaxConnections, the gRPC one's connections paced once
// struck (Limits.PacedReadRate).
func (d *Daemon) listen() error {
	d.pacer = readpace.New(int64(d.cfg.Limits.PacedReadRate), PacedQuiet)
	for _, l := range []struct {
		name, addr string
		lis        **connlimit.Listener
		paced      bool
	}{
		{"grpc", d.cfg.GRPCAddr, &d.grpcLis, true},
		{"http", d.cfg.HTTPAddr, &d.httpLis, false},
		{"admin", d.cfg.AdminAddr, &d.adminLis, false},
		{"metrics", d.cfg.MetricsAddr, &d.metricsLis, false},
	} {
		if l.addr == "" {
			continue
		}
		nl, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("%s listener: %w", l.name, err)
		}
		if l.paced {
			nl = d.pacer.Wrap(nl)
		}
		*l.lis = connlimit.New(nl, d.cfg.Limits.MaxConnections)
	}
	return nil
}

// abort closes what the steps of Start opened before one of them failed.
func (d *Daemon) abort() {
	for _, w := range []*reload.Watcher{d.policyWatch, d.tlsWatch} {
		if w != nil {
			w.Close()
		}
	}
	if d.store != nil {
		d.store.close()
	}
	d.stopTracing()
	for _, l := range []*connlimit.Listener{d.grpcLis, d.httpLis, d.adminLis, d.metricsLis} {
		if l != nil {
			l.Close()
		}
	}
}

// streamWorkers is how many goroutines serve gRPC calls, each call after
// call, keeping the stack that the calls grew (a call beyond them gets a
// goroutine of its own, as without workers). A new goroutine per call
// grows its stack on every call: workers measured about 2 µs of CPU less
// per call, with the memory store (scripts/bench, the default policy:
// 19.0 -> 17.1 µs) as with --store redis (64 callers).
const streamWorkers = 64

// envoyOptions are the Envoy v3 API's options, for the gRPC and the HTTP
// servers alike.
func (d *Daemon) envoyOptions() []envoyapi.Option {
	return []envoyapi.Option{envoyapi.WithHeaders(d.cfg.ResponseHeaders), envoyapi.WithDynamicMetadata(d.cfg.ResponseDynamicMetadata)}
}

// grpcServer returns the gRPC server with every service registered:
// ratelimit.v1, Envoy's v3, health and reflection, behind the metrics
// interceptors, authorization (with Config.AuthzPolicy) and
// Config.UnaryInterceptors.
func (d *Daemon) grpcServer() *grpc.Server {
	// A request that does not decode is InvalidArgument, counted by the
	// metrics interceptors before it.
	dec := grpcdecode.New()
	opts := []grpc.ServerOption{
		dec.ServerOption(),
		grpc.ChainUnaryInterceptor(append(d.transportUnary(), d.unaryInterceptors(dec.UnaryServerInterceptor())...)...),
		grpc.ChainStreamInterceptor(append(d.transportStream(), d.metrics.StreamServerInterceptor(), dec.StreamServerInterceptor())...),
		grpc.NumStreamWorkers(streamWorkers),
	}
	opts = append(opts, d.grpcLimits()...)
	if d.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(d.tls.Config())))
	}
	g := grpc.NewServer(opts...)
	grpcapi.Register(g, d.engine)
	envoyapi.Register(g, d.engine, d.envoyOptions()...)
	d.rlqs.Register(g)
	healthpb.RegisterHealthServer(g, &drainingHealth{Server: d.health, drain: d.drain})
	reflection.Register(g)
	d.boundStreams(g)
	return g
}

// serversHTTP makes the HTTP server, and the admin server when the
// operator's surface has an address of its own.
func (d *Daemon) serversHTTP() {
	decisions := http.NewServeMux()
	d.decisionRoutes(decisions)
	if d.adminLis == nil {
		d.adminRoutes(decisions)
		d.http = d.httpServer(decisions, d.httpLis)
		return
	}
	d.http = d.httpServer(decisions, d.httpLis)
	admin := http.NewServeMux()
	d.adminRoutes(admin)
	d.admin = d.httpServer(admin, d.adminLis)
}

// decisionRoutes adds what the HTTP port serves: health, readiness, the
// store's own endpoints, and the decision APIs as JSON.
func (d *Daemon) decisionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", d.readyz)
	mux.HandleFunc("GET /healthcheck", d.healthcheck)
	d.store.routes(mux)
	// The decision APIs as JSON: the very services the gRPC server has,
	// through the same interceptors, refused like gRPC calls once draining.
	api := httpapi.New(mux, httpapi.WithInterceptors(append([]grpc.UnaryServerInterceptor{d.refuseUnlessServing}, d.unaryInterceptors(httpapi.CheckDecoded)...)...),
		httpapi.WithReadTimeout(d.cfg.Limits.MessageTimeout), httpapi.WithWaiting(d.bodies))
	grpcapi.Register(api, d.engine)
	envoyapi.Register(api, d.engine, d.envoyOptions()...)
}

// adminRoutes adds the operator's surface: metrics, the policy, pprof and
// the console.
func (d *Daemon) adminRoutes(mux *http.ServeMux) {
	mux.Handle("GET /metrics", d.metrics.Handler())
	admin.Register(mux, admin.Options{Policy: d.loadedPolicy, XDS: d.xdsStatus, Pprof: d.cfg.Pprof})
	if !d.cfg.NoConsole {
		console.New(console.Options{
			Policy: d.loadedPolicy, Reload: d.reloadStatus, Engine: d.engine,
			RuleTotals: d.metrics.RuleTotals, Top: d.topDenied, Quota: d.quota.View,
		}).Register(mux)
	}
}

// unaryInterceptors are what every decision call goes through, over gRPC
// and over HTTP: with tracing on, the one that starts the call's span;
// the daemon's own (metrics, the transport's check that the request
// decoded, authorization), then Config.UnaryInterceptors.
func (d *Daemon) unaryInterceptors(decoded grpc.UnaryServerInterceptor) []grpc.UnaryServerInterceptor {
	return append(append(d.tracingInterceptors(), d.ownInterceptors(decoded)...), d.cfg.UnaryInterceptors...)
}

// refuseUnlessServing answers Unavailable, for HTTP calls that the HTTP
// server receives while the gRPC server would not take them: before the
// store has its buckets back from the state file, and once the daemon
// refuses new calls (Shutdown's step 3).
func (d *Daemon) refuseUnlessServing(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	select {
	case <-d.ready:
	default:
		return nil, status.Error(codes.Unavailable, "ratelimitd is starting: loading its state file")
	}
	select {
	case <-d.drain:
		return nil, status.Error(codes.Unavailable, "ratelimitd is shutting down")
	default:
		return handler(ctx, req)
	}
}

// serveHTTP starts the HTTP server, and the admin server.
func (d *Daemon) serveHTTP() {
	serve := func(s *http.Server, l net.Listener) {
		err := s.Serve(l)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		d.served <- err
	}
	go serve(d.http, d.httpLis)
	if d.admin != nil {
		go serve(d.admin, d.adminLis)
	}
}

// serve starts the background jobs (the store's, the file watchers) and
// the gRPC server.
func (d *Daemon) serve() {
	jobs, stop := context.WithCancel(context.Background())
	d.stopJobs = stop
	go d.store.run(jobs)
	go every(jobs, topDeniedGeneration, d.topDenied.Rotate)
	go every(jobs, d.waiting.ExpireEvery(), d.waiting.Expire)
	go every(jobs, d.bodies.ExpireEvery(), d.bodies.Expire)
	go every(jobs, quotaTick, d.quota.Tick)
	go every(jobs, time.Second, d.followStore)
	if d.policyWatch != nil {
		go d.policyWatch.Run(jobs, func() { d.Reload() })
	}
	if d.tlsWatch != nil {
		go d.tlsWatch.Run(jobs, d.reloadTLS)
	}
	if d.authz != nil {
		go d.authz.Run(jobs)
	}
	if d.xds != nil {
		go d.xds.Run(jobs)
	}
	d.serveMetrics()
	go func() { d.served <- d.grpc.Serve(d.grpcLis) }()
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

func tlsMode(s *tlsconfig.Server) string {
	switch {
	case s == nil:
		return "off"
	case s.MutualTLS():
		return "mutual"
	}
	return "on"
}

// policySource names where the policy comes from, for the logs.
func (d *Daemon) policySource() string {
	switch {
	case d.xds != nil:
		return xdsSource(d.cfg.XDS)
	case d.cfg.ConfigPath == "":
		return "embedded default"
	}
	return d.cfg.ConfigPath
}

// setServing sets the health of the server as a whole and of each service:
// s, except NOT_SERVING while the store refuses the daemon's configuration
// (followStore), as /readyz says.
func (d *Daemon) setServing(s healthpb.HealthCheckResponse_ServingStatus) {
	d.servingMu.Lock()
	defer d.servingMu.Unlock()
	d.serving = s
	d.applyServing()
}

// followStore makes the health follow the store's refusal of the daemon's
// configuration (Redis's ACL or password changed): NOT_SERVING while it
// lasts, as /readyz.
func (d *Daemon) followStore() {
	refuses := d.store.misconfigured() != nil
	d.servingMu.Lock()
	defer d.servingMu.Unlock()
	if refuses != d.storeRefuses {
		d.storeRefuses = refuses
		d.applyServing()
	}
}

// applyServing sets the health setServing and followStore make. Under
// servingMu. (Once the health server is shut down, as the daemon drains,
// it ignores every change.)
func (d *Daemon) applyServing() {
	s := d.serving
	if d.storeRefuses {
		s = healthpb.HealthCheckResponse_NOT_SERVING
	}
	d.health.SetServingStatus("", s)
	d.health.SetServingStatus(ratelimitv1.RateLimitService_ServiceDesc.ServiceName, s)
	d.health.SetServingStatus(envoyapi.ServiceName, s)
	d.health.SetServingStatus(rlqsapi.ServiceName, s)
}

func (d *Daemon) readyz(w http.ResponseWriter, r *http.Request) {
	if err := d.store.misconfigured(); err != nil {
		http.Error(w, "not ready: the store refuses the daemon's configuration: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	resp, err := d.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// GRPCAddr returns the address the gRPC server listens on.
func (d *Daemon) GRPCAddr() string { return d.grpcLis.Addr().String() }

// HTTPAddr returns the address the HTTP server listens on.
func (d *Daemon) HTTPAddr() string { return d.httpLis.Addr().String() }

// AdminAddr returns the address the operator's surface is served on:
// Config.AdminAddr's listener, or the HTTP server's without one.
func (d *Daemon) AdminAddr() string {
	if d.adminLis == nil {
		return d.HTTPAddr()
	}
	return d.adminLis.Addr().String()
}

// Engine returns the daemon's engine.
func (d *Daemon) Engine() *engine.Engine { return d.engine }

// Done returns a channel that receives the first error that stops a server
// unexpectedly.
func (d *Daemon) Done() <-chan error { return d.served }

// Shutdown drains the daemon and stops it:
//
//  1. health turns NOT_SERVING, for good: the gRPC health service for the
//     server ("") and every service, and /readyz (503);
//  2. for Config.ShutdownDelay, new calls are still decided, so that load
//     balancers polling health move away first;
//  3. new calls are refused (the gRPC listener closes, and clients are told
//     to go away; a call that arrives now fails with Unavailable), health
//     Watch streams end once they have reported NOT_SERVING, and calls in
//     flight finish;
//  4. if calls are still in flight when Config.ShutdownGrace has passed
//     since step 3, they are cut off (and a warning logged);
//  5. the HTTP server, the file watchers and the bucket sweeper (or the
//     Redis health pings) stop, and the Redis connections close; with
//     Config.StateFile, the memory store is written to it one last time.
//
// ctx's end cuts steps 2 and 3 short. Calls after the first wait for it to
// finish and do nothing more.
func (d *Daemon) Shutdown(ctx context.Context) {
	d.shutdown.Do(func() { d.drainAndStop(ctx) })
}

func (d *Daemon) drainAndStop(ctx context.Context) {
	d.draining.Store(true)
	d.health.Shutdown()
	d.log.Info("draining: health is NOT_SERVING", "delay", d.cfg.ShutdownDelay, "grace", d.cfg.ShutdownGrace)
	if d.cfg.ShutdownDelay > 0 {
		t := time.NewTimer(d.cfg.ShutdownDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}

	close(d.drain)
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ShutdownGrace)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		d.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		d.log.Warn("shutdown grace period over; cutting off in-flight calls")
		d.grpc.Stop()
		<-stopped
	}
	for _, s := range []*http.Server{d.http, d.admin, d.metricsHTTP} {
		if s != nil && s.Shutdown(ctx) != nil {
			s.Close()
		}
	}
	d.stopJobs()
	d.store.close()
	d.stopTracing()
	d.log.Info("stopped")
}
