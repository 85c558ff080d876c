package daemon

import (
	"context"
	"os"
	"time"

	"google.golang.org/grpc"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo"
	"github.com/ratelimitd/ratelimitd/internal/observe/tracing"
	"github.com/ratelimitd/ratelimitd/internal/store"
)

// startTracing starts the OTLP exporter when Config.Tracing or the
// OpenTelemetry environment turns tracing on; otherwise d.tracer stays nil
// and no hook of it is installed.
func (d *Daemon) startTracing() (err error) {
	d.tracer, err = tracing.New(d.cfg.Tracing, os.Getenv, buildinfo.Read().Version, d.log)
	return err
}

// tracedStore is the store the engine decides with: with tracing on and
// Redis, one whose calls are spans of their own. (The decision itself is
// added to the call's span by the engine's observer, Daemon.observe.)
func (d *Daemon) tracedStore() store.Store {
	if d.tracer == nil || d.cfg.Store != "redis" {
		return d.store
	}
	return d.tracer.Store(d.store, "redis")
}

// tracingInterceptors is the interceptor that starts a span per decision
// call, first of all, when tracing is on.
func (d *Daemon) tracingInterceptors() []grpc.UnaryServerInterceptor {
	if d.tracer == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{d.tracer.UnaryServerInterceptor(ratelimitv1.RateLimitService_ServiceDesc.ServiceName, envoyapi.ServiceName)}
}

// stopTracing sends the spans not sent yet, for at most
// tracingShutdownGrace.
func (d *Daemon) stopTracing() {
	if d.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownGrace)
	defer cancel()
	if err := d.tracer.Shutdown(ctx); err != nil {
		d.log.Warn("traces: sending the last spans failed", "err", err)
	}
}

// tracingShutdownGrace bounds how long the daemon's end waits for the
// collector to take the last spans.
const tracingShutdownGrace = 5 * time.Second

// tracingMode names where the spans go, for the start log line.
func (d *Daemon) tracingMode() string {
	if d.tracer == nil {
		return "off"
	}
	return d.tracer.String()
}
