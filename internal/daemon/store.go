package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
)

// RedisHealthService is the gRPC health service that says whether the Redis
// store reaches Redis: SERVING while it does, NOT_SERVING while requests
// are decided by the failure mode. The daemon's own health ("" and the
// API services) does not follow it: every daemon shares the one Redis, so
// taking them out of a load balancer would only turn a degraded service
// into no service.
const RedisHealthService = "ratelimitd.redis"

// storeBackend is the bucket store as the daemon runs it, whichever store
// Config.Store names: the decisions (store.Store), its background work, its
// metrics, its HTTP endpoints and its end. The daemon holds exactly one, so
// nothing else in the daemon asks which store it is.
type storeBackend interface {
	store.Store
	// run does the store's background work until ctx ends: reclaiming idle
	// buckets (memory), pinging Redis so that health follows it (redis).
	run(ctx context.Context)
	// collectors are the store's Prometheus metrics.
	collectors() []prometheus.Collector
	// routes adds the store's own endpoints to the HTTP mux.
	routes(mux *http.ServeMux)
	// restore brings back the buckets kept across restarts (the memory
	// store with Config.StateFile), as adopt converts them and those it
	// accepts, before the daemon serves; a store that keeps none does
	// nothing.
	restore(adopt memory.Adopt)
	// misconfigured returns why the store refuses to work with the
	// daemon's configuration (Redis's ACL or password), nil while it does
	// not: the daemon is then not ready (/readyz says why).
	misconfigured() error
	// quotaLedger is where daemons sharing the store keep their parts of
	// quota limits (package quota, "Limits shared by several daemons"), nil
	// for a store that no other daemon shares.
	quotaLedger() quotaservice.Ledger
	// close releases what the store holds, once no call is deciding.
	close()
	// String names the store in the start log line.
	String() string
}

// openStore makes the store cfg.Store names: memory (the default) or redis.
// A Redis store reports its health to hs as RedisHealthService.
func openStore(cfg Config, hs *health.Server) (storeBackend, error) {
	var (
		b   storeBackend
		err error
	)
	switch cfg.Store {
	case "", "memory":
		b, err = newMemoryBackend(cfg)
	case "redis":
		b, err = newRedisBackend(cfg, hs)
	default:
		err = fmt.Errorf("store %q: want memory or redis", cfg.Store)
	}
	if err != nil {
		// Not b: a nil *memoryBackend in the interface is not a nil
		// storeBackend, and abort would close it.
		return nil, err
	}
	return b, nil
}

// memoryBackend is the sharded in-memory store, swept every SweepInterval
// and, with Config.StateFile, kept in that file across restarts.
type memoryBackend struct {
	*memory.Store
	sweepInterval time.Duration
	snapshots     *snapshots         // nil without Config.StateFile
	lock          *snapshot.FileLock // Config.StateFile's, held until close
}

// newMemoryBackend makes the memory store and, with Config.StateFile, takes
// the state file's lock: a second daemon on the same file fails to start.
func newMemoryBackend(cfg Config) (*memoryBackend, error) {
	var opts []memory.Option
	if cfg.MaxBuckets > 0 {
		opts = append(opts, memory.WithMaxBuckets(cfg.MaxBuckets))
	}
	if cfg.MaxMemory > 0 {
		opts = append(opts, memory.WithMaxBytes(cfg.MaxMemory))
	}
	b := &memoryBackend{Store: memory.New(cfg.Clock, opts...), sweepInterval: cfg.SweepInterval}
	if cfg.StateFile != "" {
		if fi, err := os.Stat(cfg.StateFile); err == nil && fi.IsDir() {
			return nil, fmt.Errorf("--state-file %s is a directory: it names the file the buckets are kept in (say %s)",
				cfg.StateFile, filepath.Join(cfg.StateFile, "ratelimitd.state"))
		}
		lock, err := snapshot.Lock(cfg.StateFile)
		if err != nil {
			return nil, stateFileError(cfg.StateFile, err)
		}
		b.lock = lock
		b.snapshots = newSnapshots(b.Store, cfg.StateFile, cfg.SnapshotInterval, cfg.Logger)
	}
	return b, nil
}

// stateFileError says why the state file at path could not be locked, in
// the operator's terms: taken by another daemon, a directory that does not
// exist, or one this process may not write in.
func stateFileError(path string, err error) error {
	dir := filepath.Dir(path)
	switch {
	case errors.Is(err, snapshot.ErrLocked):
		return fmt.Errorf("--state-file: %w (each daemon needs a state file of its own)", err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--state-file %s: the directory %s does not exist (create it, or mount the state volume there)", path, dir)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return fmt.Errorf("--state-file %s: the directory %s is not writable by this process (uid %d): the daemon writes the file and %s beside it (%v)",
			path, dir, os.Getuid(), filepath.Base(path)+".lock", err)
	}
	return fmt.Errorf("--state-file %s: %w", path, err)
}

func (b *memoryBackend) run(ctx context.Context) {
	if b.snapshots != nil {
		go b.snapshots.run(ctx)
	}
	b.Run(ctx, b.sweepInterval)
}
func (b *memoryBackend) collectors() []prometheus.Collector {
	c := metrics.MemoryStoreCollectors(b.Store)
	if b.snapshots != nil {
		c = append(c, b.snapshots.collectors()...)
	}
	return c
}
func (b *memoryBackend) routes(*http.ServeMux)            {}
func (b *memoryBackend) misconfigured() error             { return nil }
func (b *memoryBackend) quotaLedger() quotaservice.Ledger { return nil }
func (b *memoryBackend) restore(adopt memory.Adopt) {
	if b.snapshots != nil {
		b.snapshots.load(adopt)
	}
}

// close writes the last snapshot, when there is a state file and the
// daemon got as far as loading one.
func (b *memoryBackend) close() {
	if b.snapshots != nil {
		b.snapshots.write(true)
		b.lock.Unlock()
	}
}
func (b *memoryBackend) String() string { return "memory" }

// redisCheckTimeout bounds the Redis store's check at start (a dozen
// round trips).
const redisCheckTimeout = 5 * time.Second

// redisBackend is the Redis store, shared by every daemon on the same
// Redis, in the guard that decides while Redis fails.
type redisBackend struct {
	*guard.Guard
	redis *redisstore.Store
	name  string
}

func newRedisBackend(cfg Config, hs *health.Server) (*redisBackend, error) {
	rc := cfg.Redis
	rc.Logger = cfg.Logger
	rs, err := redisstore.New(rc)
	if err != nil {
		return nil, err
	}
	gc := cfg.RedisGuard
	gc.Name, gc.Logger = "redis", cfg.Logger
	user := gc.OnHealth
	gc.OnHealth = func(up bool, err error) {
		status := healthpb.HealthCheckResponse_SERVING
		if !up {
			status = healthpb.HealthCheckResponse_NOT_SERVING
		}
		hs.SetServingStatus(RedisHealthService, status)
		if user != nil {
			user(up, err)
		}
	}
	g, err := guard.New(rs, gc)
	if err != nil {
		rs.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	// Everything the store does, once, on keys of its own: Redis refusing
	// any of it is a configuration error, and the daemon does not start.
	// Redis unreachable is an outage, decided by the failure mode.
	ctx, cancel := context.WithTimeout(context.Background(), redisCheckTimeout)
	err = rs.Check(ctx)
	cancel()
	switch {
	case guard.IsConfigError(err):
		g.Close()
		rs.Close()
		return nil, fmt.Errorf("redis refuses ratelimitd (a configuration error, not an outage; see docs/redis.md, Security): %w", err)
	case err != nil:
		cfg.Logger.Warn("redis: could not check the configuration at start; serving, deciding by the failure mode while redis fails",
			"failure_mode", gc.FailureMode.String(), "err", err)
	}
	hs.SetServingStatus(RedisHealthService, healthpb.HealthCheckResponse_SERVING)
	name := "redis " + cfg.Redis.Addr
	switch {
	case len(cfg.Redis.ClusterAddrs) > 0:
		name = "redis cluster"
	case cfg.Redis.SentinelMaster != "":
		name = "redis sentinel master " + cfg.Redis.SentinelMaster
	}
	return &redisBackend{Guard: g, redis: rs, name: name}, nil
}

func (b *redisBackend) run(ctx context.Context) { b.Run(ctx, time.Second) }
func (b *redisBackend) collectors() []prometheus.Collector {
	return append(b.redis.Collectors(), b.Guard.Collectors()...)
}
func (b *redisBackend) restore(memory.Adopt)             {}
func (b *redisBackend) misconfigured() error             { return b.Misconfigured() }
func (b *redisBackend) quotaLedger() quotaservice.Ledger { return b.redis.QuotaLedger() }
func (b *redisBackend) close()                           { b.Guard.Close(); b.redis.Close() }
func (b *redisBackend) String() string                   { return b.name }

// routes serves GET /healthz/redis: 200 "ok" while the store reaches
// Redis, 503 with the failure while it does not.
func (b *redisBackend) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz/redis", func(w http.ResponseWriter, _ *http.Request) {
		if up, why := b.Healthy(); !up {
			http.Error(w, "redis: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// RedisTLS returns the TLS configuration for connecting to Redis: the
// system's roots, or only the CA certificates in the PEM file caFile when
// given, and a client certificate when certFile and keyFile are given.
func RedisTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		var err error
		if c.RootCAs, err = tlsconfig.CertPool(caFile); err != nil {
			return nil, fmt.Errorf("redis TLS CA: %w", err)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("redis TLS: a client certificate needs its key, and a key its certificate")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
