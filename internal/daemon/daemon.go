// Package daemon assembles ratelimitd: the policy, the store, the engine,
// the gRPC server (ratelimit.v1, Envoy's envoy.service.ratelimit.v3, health,
// reflection) and the HTTP server (health), and runs them until stopped.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/clock"
	"github.com/ratelimitd/ratelimitd/internal/config"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/grpcapi"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// Config is what the daemon is started with.
type Config struct {
	// ConfigPath is a policy file or a directory of them; empty for the
	// embedded default policy.
	ConfigPath string
	// GRPCAddr and HTTPAddr are listen addresses; port 0 picks a free one.
	GRPCAddr string
	HTTPAddr string
	// MaxBuckets bounds the memory store (0 for its default).
	MaxBuckets int
	// SweepInterval is how often idle buckets are reclaimed (0: 10s).
	SweepInterval time.Duration
	// ShutdownGrace is how long in-flight requests may take to finish on
	// shutdown before they are cut off (0: 10s).
	ShutdownGrace time.Duration
	// Bounds limits request sizes (zero value: engine.DefaultBounds).
	Bounds engine.Bounds
	// ShadowMode is global shadow mode (engine.WithShadowMode): no request
	// is denied, on either API.
	ShadowMode bool
	// ResponseHeaders selects the headers Envoy v3 responses carry (zero
	// value: none).
	ResponseHeaders envoyapi.Headers
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
	store    *memory.Store
	stopJobs context.CancelFunc
	served   chan error
}

// Start loads the policy, binds both listeners and starts serving. It fails
// without serving anything when the policy is invalid or an address cannot
// be bound.
func Start(cfg Config) (*Daemon, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.NewMonotonic()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Bounds == (engine.Bounds{}) {
		cfg.Bounds = engine.DefaultBounds
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	policy, err := loadPolicy(cfg.ConfigPath)
	if err != nil {
		return nil, err
	}

	var storeOpts []memory.Option
	if cfg.MaxBuckets > 0 {
		storeOpts = append(storeOpts, memory.WithMaxBuckets(cfg.MaxBuckets))
	}
	d := &Daemon{
		cfg:    cfg,
		log:    cfg.Logger,
		store:  memory.New(cfg.Clock, storeOpts...),
		health: health.NewServer(),
		served: make(chan error, 2),
	}
	d.engine = engine.New(policy, d.store, engine.WithBounds(cfg.Bounds), engine.WithShadowMode(cfg.ShadowMode))

	d.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("grpc listener: %w", err)
	}
	d.httpLis, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		d.grpcLis.Close()
		return nil, fmt.Errorf("http listener: %w", err)
	}

	d.grpc = grpc.NewServer()
	grpcapi.Register(d.grpc, d.engine)
	envoyapi.Register(d.grpc, d.engine, envoyapi.WithHeaders(cfg.ResponseHeaders))
	healthpb.RegisterHealthServer(d.grpc, d.health)
	reflection.Register(d.grpc)
	d.setServing(healthpb.HealthCheckResponse_SERVING)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", d.readyz)
	d.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	jobs, stop := context.WithCancel(context.Background())
	d.stopJobs = stop
	go d.store.Run(jobs, cfg.SweepInterval)
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
		"shadow_mode", cfg.ShadowMode, "response_headers", cfg.ResponseHeaders.String())
	return d, nil
}

func loadPolicy(path string) (*config.Policy, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
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

// Shutdown drains the daemon: health turns NOT_SERVING, new calls are
// refused, in-flight calls may finish until the grace period (or ctx) ends,
// then everything stops.
func (d *Daemon) Shutdown(ctx context.Context) {
	d.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
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
	}
	d.http.Shutdown(ctx)
	d.stopJobs()
}
