package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
)

// RedisHealthService is the gRPC health service that says whether the Redis
// store reaches Redis: SERVING while it does, NOT_SERVING while requests
// are decided by the failure mode. The daemon's own health ("" and the
// API services) does not follow it: every daemon shares the one Redis, so
// taking them out of a load balancer would only turn a degraded service
// into no service.
const RedisHealthService = "ratelimitd.redis"

// newStore makes the store cfg.Store names: memory (the default) or redis.
// Exactly one of mem and rs is set.
func newStore(cfg Config, hs *health.Server) (st store.Store, mem *memory.Store, rs *redisstore.Store, err error) {
	switch cfg.Store {
	case "", "memory":
		var opts []memory.Option
		if cfg.MaxBuckets > 0 {
			opts = append(opts, memory.WithMaxBuckets(cfg.MaxBuckets))
		}
		mem = memory.New(cfg.Clock, opts...)
		return mem, mem, nil, nil
	case "redis":
		rc := cfg.Redis
		rc.Logger = cfg.Logger
		user := rc.OnHealth
		rc.OnHealth = func(up bool, err error) {
			status := healthpb.HealthCheckResponse_SERVING
			if !up {
				status = healthpb.HealthCheckResponse_NOT_SERVING
			}
			hs.SetServingStatus(RedisHealthService, status)
			if user != nil {
				user(up, err)
			}
		}
		if rs, err = redisstore.New(rc); err != nil {
			return nil, nil, nil, err
		}
		hs.SetServingStatus(RedisHealthService, healthpb.HealthCheckResponse_SERVING)
		return rs, nil, rs, nil
	}
	return nil, nil, nil, fmt.Errorf("store %q: want memory or redis", cfg.Store)
}

// redisHealthz serves GET /healthz/redis: 200 "ok" while the Redis store
// reaches Redis, 503 with the failure while it does not.
func redisHealthz(rs *redisstore.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if up, why := rs.Healthy(); !up {
			http.Error(w, "redis: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

func storeName(cfg Config) string {
	if cfg.Store == "redis" {
		if len(cfg.Redis.ClusterAddrs) > 0 {
			return "redis cluster"
		}
		return "redis " + cfg.Redis.Addr
	}
	return "memory"
}

// RedisTLS returns the TLS configuration for connecting to Redis: the
// system's roots, or only the CA certificates in the PEM file caFile when
// given, and a client certificate when certFile and keyFile are given.
func RedisTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS CA: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA %s: no PEM certificate in it", caFile)
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
