// Package daemon assembles ratelimitd: the policy, the store, the engine,
// the gRPC server (ratelimit.v1, Envoy's envoy.service.ratelimit.v3, health,
// reflection; TLS optional) and the HTTP server (health, metrics, admin), and
// runs them until stopped.
//
// While it runs, the daemon reloads the policy when the files at
// Config.ConfigPath change (Reload), and the TLS files when they change.
// Shutdown drains it.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/admin"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/config"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/grpcapi"
	"github.com/ratelimitd/ratelimitd/internal/metrics"
	"github.com/ratelimitd/ratelimitd/internal/reload"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

// Config is what the daemon is started with.
type Config struct {
	// ConfigPath is a policy file or a directory of them; empty for the
	// embedded default policy.
	ConfigPath string
	// GRPCAddr and HTTPAddr are listen addresses; port 0 picks a free one.
	GRPCAddr string
	HTTPAddr string
	// Store is where buckets live: "memory" (the default, "" too) or
	// "redis", shared by every daemon on the same Redis.
	Store string
	// Redis configures the Redis store (Store "redis"). It decides on Redis
	// TIME, not Clock; its Logger is the daemon's.
	Redis redisstore.Config
	// MaxBuckets bounds the memory store (0 for its default).
	MaxBuckets int
	// SweepInterval is how often idle buckets are reclaimed (0: 10s).
	SweepInterval time.Duration
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
	// Pprof serves /debug/pprof/ on the HTTP address.
	Pprof bool
	// TLS, when TLS.Cert is set, serves gRPC over TLS, and mutual TLS when
	// TLS.ClientCA is set too. The files are loaded again when they change.
	TLS tlsconfig.Files
	// Bounds limits request sizes (zero value: engine.DefaultBounds).
	Bounds engine.Bounds
	// ShadowMode is global shadow mode (engine.WithShadowMode): no request
	// is denied, on either API.
	ShadowMode bool
	// ResponseHeaders selects the headers Envoy v3 responses carry (zero
	// value: none).
	ResponseHeaders envoyapi.Headers
	// UnaryInterceptors run on every unary call after the daemon's own
	// (metrics), in order: for a program embedding the daemon (auth,
	// tracing) and for tests that hold a call in flight.
	UnaryInterceptors []grpc.UnaryServerInterceptor
	// Clock is the decision clock (nil: the real monotonic clock).
	Clock clock.Clock
	// Logger receives the daemon's logs (nil: slog.Default()).
	Logger *slog.Logger
}

// Daemon is a running ratelimitd.
type Daemon struct {
	cfg      Config
	log      *slog.Logger
	grpc     *grpc.Server
	http     *http.Server
	health   *health.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	engine   *engine.Engine
	store    *memory.Store     // nil with Redis
	redis    *redisstore.Store // nil with memory
	stopJobs context.CancelFunc
	served   chan error

	metrics   *metrics.Metrics
	tls       *tlsconfig.Server // nil without TLS
	loaded    atomic.Pointer[admin.Loaded]
	reloading sync.Mutex    // held by Reload
	drain     chan struct{} // closed when new calls start being refused
	shutdown  sync.Once
}

// Start loads the policy (and the TLS files), binds both listeners and
// starts serving, with health SERVING. It fails without serving anything
// when the policy or the TLS files are invalid, or an address cannot be
// bound.
func Start(cfg Config) (d *Daemon, err error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.NewMonotonic()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Bounds == (engine.Bounds{}) {
		cfg.Bounds = engine.DefaultBounds
	}
	if err := cfg.Bounds.Check(); err != nil {
		return nil, fmt.Errorf("request bounds: %w", err)
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	if cfg.NearLimitRatio == 0 {
		cfg.NearLimitRatio = metrics.DefaultNearLimitRatio
	}
	if !(cfg.NearLimitRatio > 0 && cfg.NearLimitRatio <= 1) {
		return nil, fmt.Errorf("near-limit ratio %v: want a number in (0, 1]", cfg.NearLimitRatio)
	}
	if cfg.TLS != (tlsconfig.Files{}) && (cfg.TLS.Cert == "" || cfg.TLS.Key == "") {
		return nil, errors.New("TLS needs a certificate and its key (a client CA alone is not enough)")
	}

	// Watch files before reading them, so that no change in between is
	// missed. Every watcher is closed if Start fails.
	var watchers []*reload.Watcher
	defer func() {
		if err != nil {
			for _, w := range watchers {
				w.Close()
			}
		}
	}()
	var policyWatch, tlsWatch *reload.Watcher
	if cfg.ConfigPath != "" {
		if policyWatch, err = reload.New([]string{cfg.ConfigPath}); err != nil {
			return nil, fmt.Errorf("watching %s: %w", cfg.ConfigPath, err)
		}
		watchers = append(watchers, policyWatch)
	}
	policy, err := loadPolicy(cfg.ConfigPath)
	if err != nil {
		return nil, err
	}
	m := metrics.New(metrics.WithNearLimitRatio(cfg.NearLimitRatio))
	loadedAt := time.Now()
	m.PolicyLoaded(policy, loadedAt)

	var tlsServer *tlsconfig.Server
	if cfg.TLS.Cert != "" {
		if tlsWatch, err = reload.New(cfg.TLS.Paths()); err != nil {
			return nil, fmt.Errorf("watching the TLS files: %w", err)
		}
		watchers = append(watchers, tlsWatch)
		if tlsServer, err = tlsconfig.New(cfg.TLS); err != nil {
			return nil, err
		}
		m.CertificateLoaded(false, tlsServer.NotAfter(), nil)
	}

	healthServer := health.NewServer()
	st, mem, rs, err := newStore(cfg, healthServer)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && rs != nil {
			rs.Close()
		}
	}()
	d = &Daemon{
		cfg:     cfg,
		log:     cfg.Logger,
		store:   mem,
		redis:   rs,
		health:  healthServer,
		served:  make(chan error, 2),
		metrics: m,
		tls:     tlsServer,
		drain:   make(chan struct{}),
	}
	d.loaded.Store(&admin.Loaded{Policy: policy, Path: cfg.ConfigPath, At: loadedAt})
	maxBuckets := cfg.MaxBuckets
	if maxBuckets <= 0 {
		maxBuckets = memory.DefaultMaxBuckets
	}
	if mem != nil {
		m.WatchStore(mem, maxBuckets)
	} else {
		m.Registry().MustRegister(rs.Collectors()...)
	}
	d.engine = engine.New(policy, st, engine.WithBounds(cfg.Bounds), engine.WithShadowMode(cfg.ShadowMode), engine.WithObserver(m.Observe))

	d.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("grpc listener: %w", err)
	}
	d.httpLis, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		d.grpcLis.Close()
		return nil, fmt.Errorf("http listener: %w", err)
	}

	grpcOpts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{m.UnaryServerInterceptor()}, cfg.UnaryInterceptors...)...),
		grpc.ChainStreamInterceptor(m.StreamServerInterceptor()),
	}
	if tlsServer != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsServer.Config())))
	}
	d.grpc = grpc.NewServer(grpcOpts...)
	grpcapi.Register(d.grpc, d.engine)
	envoyapi.Register(d.grpc, d.engine, envoyapi.WithHeaders(cfg.ResponseHeaders))
	healthpb.RegisterHealthServer(d.grpc, &drainingHealth{Server: d.health, drain: d.drain})
	reflection.Register(d.grpc)
	d.setServing(healthpb.HealthCheckResponse_SERVING)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", d.readyz)
	if rs != nil {
		mux.HandleFunc("GET /healthz/redis", redisHealthz(rs))
	}
	mux.Handle("GET /metrics", m.Handler())
	admin.Register(mux, admin.Options{Policy: d.loadedPolicy, Pprof: cfg.Pprof})
	d.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	jobs, stop := context.WithCancel(context.Background())
	d.stopJobs = stop
	if mem != nil {
		go mem.Run(jobs, cfg.SweepInterval)
	} else {
		go rs.Run(jobs, time.Second)
	}
	if policyWatch != nil {
		go policyWatch.Run(jobs, func() { d.Reload() })
	}
	if tlsWatch != nil {
		go tlsWatch.Run(jobs, d.reloadTLS)
	}
	go func() { d.served <- d.grpc.Serve(d.grpcLis) }()
	go func() {
		err := d.http.Serve(d.httpLis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		d.served <- err
	}()
	d.log.Info("ratelimitd serving",
		"grpc", d.grpcLis.Addr().String(), "http", d.httpLis.Addr().String(),
		"policy", policySource(cfg.ConfigPath), "domains", len(policy.Domains()),
		"shadow_mode", cfg.ShadowMode, "response_headers", cfg.ResponseHeaders.String(),
		"tls", tlsMode(tlsServer), "store", storeName(cfg))
	return d, nil
}

func loadPolicy(path string) (*config.Policy, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
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

func policySource(path string) string {
	if path == "" {
		return "embedded default"
	}
	return path
}

// setServing sets the health of the server as a whole and of each service.
func (d *Daemon) setServing(s healthpb.HealthCheckResponse_ServingStatus) {
	d.health.SetServingStatus("", s)
	d.health.SetServingStatus(ratelimitv1.RateLimitService_ServiceDesc.ServiceName, s)
	d.health.SetServingStatus(envoyapi.ServiceName, s)
}

func (d *Daemon) readyz(w http.ResponseWriter, r *http.Request) {
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
//     Redis health pings) stop, and the Redis connections close.
//
// ctx's end cuts steps 2 and 3 short. Calls after the first wait for it to
// finish and do nothing more.
func (d *Daemon) Shutdown(ctx context.Context) {
	d.shutdown.Do(func() { d.drainAndStop(ctx) })
}

func (d *Daemon) drainAndStop(ctx context.Context) {
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
	if err := d.http.Shutdown(ctx); err != nil {
		d.http.Close()
	}
	d.stopJobs()
	if d.redis != nil {
		d.redis.Close()
	}
	d.log.Info("stopped")
}
