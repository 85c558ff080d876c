package daemon

import (
	"context"
	"sync"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// drainingHealth is the gRPC health service whose Watch streams end when
// the daemon drains, once each has told its client that the service is no
// longer SERVING. A Watch stream otherwise lasts as long as its client
// wants, and a graceful stop waits for every stream: a load balancer
// watching health would hold the shutdown open for the whole grace period.
type drainingHealth struct {
	*health.Server
	drain <-chan struct{} // closed after Server.Shutdown, when new calls are refused
}

// Watch implements grpc.health.v1.Health.Watch.
func (h *drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &watchStream{Health_WatchServer: stream, ctx: ctx, toldNotServing: make(chan struct{})}
	go func() {
		select {
		case <-h.drain:
		case <-ctx.Done():
			return
		}
		// Server.Shutdown has set every service NOT_SERVING, and Watch
		// sends that unless the stream had said so already.
		select {
		case <-w.toldNotServing:
		case <-ctx.Done():
		}
		cancel()
	}()
	return h.Server.Watch(req, w)
}

// watchStream is a Watch stream whose context the daemon can end, and that
// notes when it has sent a status other than SERVING.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx            context.Context
	once           sync.Once
	toldNotServing chan struct{}
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(r *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(r)
	if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		w.once.Do(func() { close(w.toldNotServing) })
	}
	return err
}
