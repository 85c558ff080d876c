package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/operator/admin"
	"github.com/ratelimitd/ratelimitd/internal/operator/console"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
)

// checkXDS refuses what cannot go with an xDS policy.
func (cfg Config) checkXDS() error {
	if cfg.XDS.Server == "" {
		if cfg.StartWithoutPolicy {
			return errors.New("--xds-start-without-policy without --xds-server: starting without a policy is for a policy over xDS")
		}
		return nil
	}
	switch {
	case cfg.ConfigPath != "":
		return errors.New("--config and --xds-server: the policy comes from policy files or from xDS, not both")
	case cfg.StateFile != "":
		// The state file's buckets are kept only for limits of the policy
		// at start, and an xDS policy is not there yet.
		return errors.New("--state-file and --xds-server: a state file cannot be used with a policy over xDS")
	}
	return nil
}

// xdsSource names the policy's source for logs, /policies and the console.
func xdsSource(c xdspolicy.Config) string {
	return fmt.Sprintf("xds://%s (node %s)", c.Server, c.NodeID)
}

// awaitXDS readies the subscription to the policy (which Run starts with
// the other background jobs) and puts an empty policy in force meanwhile:
// every domain is unknown.
func (d *Daemon) awaitXDS() (err error) {
	xc := d.cfg.XDS
	xc.Logger = d.log
	xc.Bounds = d.cfg.PolicyBounds
	if d.xds, err = xdspolicy.New(xc, d.applyXDS); err != nil {
		return err
	}
	empty, err := config.FromRateLimitConfigs(nil, d.cfg.PolicyBounds)
	if err != nil {
		return err
	}
	d.loaded.Store(&admin.Loaded{Policy: empty, Path: xdsSource(xc), At: time.Now()})
	d.metrics.RegisterXDS(d.xds.Status)
	d.log.Info("waiting for the policy from xDS", "server", xc.Server, "node_id", xc.NodeID, "decides_meanwhile", d.cfg.StartWithoutPolicy)
	return nil
}

// applyXDS is the xDS client's Apply: it builds the policy of a response
// through the policy files' checks and puts it in force, as Reload does,
// or refuses it (the client NACKs it) and the policy in force stays. The
// first policy makes the daemon ready.
func (d *Daemon) applyXDS(version string, configs []config.RateLimitConfig) error {
	d.reloading.Lock()
	defer d.reloading.Unlock()
	p, err := config.FromRateLimitConfigs(configs, d.cfg.PolicyBounds)
	now := time.Now()
	if err != nil {
		err = fmt.Errorf("xDS version %q refused (NACK): %w", version, err)
		d.metrics.PolicyReloaded(nil, now, err)
		d.reloadFail.Store(&console.ReloadStatus{LastError: err.Error(), LastErrorAt: now})
		return err
	}
	d.warnPolicy(p)
	d.engine.SetPolicy(p)
	d.loaded.Store(&admin.Loaded{Policy: p, Path: xdsSource(d.cfg.XDS), Version: version, At: now})
	d.metrics.PolicyReloaded(p, now, nil)
	d.reloadFail.Store(nil)
	d.log.Info("policy from xDS in force", "version", version, "domains", len(p.Domains()))
	if !d.hasPolicy() {
		close(d.policyIn)
		d.setServing(healthpb.HealthCheckResponse_SERVING) // ignored once draining
	}
	return nil
}

// hasPolicy reports whether a policy is in force: always with policy
// files; with xDS, once the first one is applied.
func (d *Daemon) hasPolicy() bool {
	select {
	case <-d.policyIn:
		return true
	default:
		return false
	}
}

// xdsStatus returns the xDS client's status, nil without xDS.
func (d *Daemon) xdsStatus() *xdspolicy.Status {
	if d.xds == nil {
		return nil
	}
	s := d.xds.Status()
	return &s
}

// refuseWithoutPolicy refuses decision calls, with Unavailable, until the
// first policy from xDS is in force (without Config.StartWithoutPolicy).
func (d *Daemon) refuseWithoutPolicy(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !d.hasPolicy() && isDecision(info.FullMethod) {
		return nil, status.Error(codes.Unavailable, "ratelimitd is starting: waiting for its policy from the xDS server")
	}
	return handler(ctx, req)
}

func isDecision(method string) bool {
	return strings.HasPrefix(method, "/"+ratelimitv1.RateLimitService_ServiceDesc.ServiceName+"/") ||
		strings.HasPrefix(method, "/"+envoyapi.ServiceName+"/")
}

// healthcheck answers GET /healthcheck as envoyproxy/ratelimit does: 200
// with the body "OK" while healthy, 500 with no body otherwise. Healthy
// means: not shutting down; the store has its buckets back (a state file);
// and a policy in force, or none yet with Config.StartWithoutPolicy and
// without Config.HealthcheckNeedsPolicy. It does not wait for the first
// xDS policy when starting without one, as upstream's does not: Envoy
// Gateway probes liveness there too. /readyz is the stricter probe.
func (d *Daemon) healthcheck(w http.ResponseWriter, _ *http.Request) {
	healthy := !d.draining.Load()
	select {
	case <-d.ready:
	default:
		healthy = false
	}
	if !d.hasPolicy() && (!d.cfg.StartWithoutPolicy || d.cfg.HealthcheckNeedsPolicy) {
		healthy = false
	}
	if !healthy {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK"))
}

// serveMetrics serves the metrics on Config.MetricsAddr, when set.
func (d *Daemon) serveMetrics() {
	if d.metricsLis == nil {
		return
	}
	path := d.cfg.MetricsPath
	if path == "" {
		path = "/metrics"
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+path, d.metrics.Handler())
	d.metricsHTTP = d.httpServer(mux, d.metricsLis)
	go func() {
		err := d.metricsHTTP.Serve(d.metricsLis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		d.served <- err
	}()
}

// MetricsAddr returns the address of the metrics listener of
// Config.MetricsAddr, "" without one.
func (d *Daemon) MetricsAddr() string {
	if d.metricsLis == nil {
		return ""
	}
	return d.metricsLis.Addr().String()
}
