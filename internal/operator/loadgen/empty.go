package loadgen

import (
	"context"

	envoyrls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// RegisterEmpty registers on g both rate-limit services (ratelimit.v1 and
// envoy.service.ratelimit.v3) answering every request with an overall OK and
// nothing else, whatever it asks: the floor of what a call costs a
// server — gRPC, HTTP/2, protobuf and the kernel — against which a real
// server's cost per request is read. Run it as its own process (ratelimitd
// bench --serve-empty) so that it is measured as the real one is.
func RegisterEmpty(g grpc.ServiceRegistrar) {
	ratelimitv1.RegisterRateLimitServiceServer(g, emptyV1{})
	envoyrls.RegisterRateLimitServiceServer(g, emptyEnvoy{})
}

type emptyV1 struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
}

func (emptyV1) ShouldRateLimit(context.Context, *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	return &ratelimitv1.ShouldRateLimitResponse{OverallCode: ratelimitv1.Code_CODE_OK}, nil
}

type emptyEnvoy struct {
	envoyrls.UnimplementedRateLimitServiceServer
}

func (emptyEnvoy) ShouldRateLimit(context.Context, *envoyrls.RateLimitRequest) (*envoyrls.RateLimitResponse, error) {
	return &envoyrls.RateLimitResponse{OverallCode: envoyrls.RateLimitResponse_OK}, nil
}
