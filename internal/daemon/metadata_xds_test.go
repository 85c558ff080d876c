package daemon_test

import (
	"context"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
)

// TestXDSMetadata: a descriptor's metadata sent over xDS (go-control-plane's
// server) comes back to Envoy in dynamic_metadata with
// --response-dynamic-metadata, as upstream returns it.
func TestXDSMetadata(t *testing.T) {
	srv := xdstest.Start(t, nil)
	d := daemontest.StartConfig(t, daemon.Config{
		XDS:                     xdspolicy.Config{Server: srv.Addr(), NodeID: xdsNode, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
		ResponseDynamicMetadata: true,
	})
	md, err := structpb.NewStruct(map[string]any{"route": map[string]any{"cluster": "openai"}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Set(xdsNode, "v1", &rlsconfv3.RateLimitConfig{Name: "ai", Domain: "ai", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "backend_name", Value: "default/openai", Metadata: md,
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 10},
	}}})
	srv.WaitRequest(xdstest.IsACK("v1"))
	waitHTTP(t, d, "/readyz", 200)

	r, err := rlsv3.NewRateLimitServiceClient(d.Dial(t)).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: "ai", Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "backend_name", Value: "default/openai"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GetDynamicMetadata().GetFields()["metadata"].GetStructValue(); !proto.Equal(got, md) {
		t.Errorf("dynamic_metadata.metadata %v, want the descriptor's %v (dynamic_metadata: %v)", got, md, r.GetDynamicMetadata())
	}
}
