package envoyapi_test

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestEnvoyExample: examples/envoy/envoy.yaml is a valid Envoy v3 bootstrap
// (it parses into go-control-plane's Bootstrap and passes its validation
// rules), its rate limit filter asks ratelimitd's default gRPC address for
// the policy's domain, and every descriptor its route's actions build
// matches a rule of examples/envoy/policy/.
func TestEnvoyExample(t *testing.T) {
	var bootstrap bootstrapv3.Bootstrap
	readYAML(t, "../../../examples/envoy/envoy.yaml", &bootstrap)
	if err := bootstrap.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml does not validate: %v", err)
	}

	var hcm hcmv3.HttpConnectionManager
	listeners := bootstrap.GetStaticResources().GetListeners()
	if len(listeners) != 1 {
		t.Fatalf("%d listeners, want 1", len(listeners))
	}
	if err := listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var filter ratelimitfilterv3.RateLimit
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&filter); err != nil {
		t.Fatalf("the first HTTP filter is not the rate limit filter: %v", err)
	}
	cluster := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	found := false
	for _, c := range bootstrap.GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		found = true
		addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if addr.GetAddress() != "127.0.0.1" || addr.GetPortValue() != 8081 {
			t.Errorf("cluster %s points at %s:%d, want ratelimitd's default 127.0.0.1:8081", cluster, addr.GetAddress(), addr.GetPortValue())
		}
		if c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
			t.Errorf("cluster %s does not speak HTTP/2 (gRPC needs it)", cluster)
		}
	}
	if !found {
		t.Fatalf("no cluster %q", cluster)
	}

	// The descriptors the route's actions build for a request from
	// 192.0.2.7 to /login?next=/ with x-user-id: alice.
	h := start(t, "../../../examples/envoy/policy/")
	request := map[string]string{":path": "/login?next=/", "x-user-id": "alice"}
	var descs []*rlcommonv3.RateLimitDescriptor
	for _, rl := range hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits() {
		descs = append(descs, descriptorOf(t, rl, request, "192.0.2.7"))
	}
	r := h.call(t, req(filter.GetDomain(), descs...))
	wantNames := []string{"everyone", "per_client", "login_attempts"}
	if len(r.Statuses) != len(wantNames) {
		t.Fatalf("%d statuses for %d rate_limits: %v", len(r.Statuses), len(wantNames), text(r))
	}
	for i, s := range r.Statuses {
		if s.GetCurrentLimit().GetName() != wantNames[i] || s.Code != okCode {
			t.Errorf("descriptor %v: status %v, want OK from rule %q", text(descs[i]), text(s), wantNames[i])
		}
	}
}

// descriptorOf builds the descriptor Envoy builds for one rate_limits
// entry, for the actions the example uses.
func descriptorOf(t *testing.T, rl *routev3.RateLimit, headers map[string]string, remote string) *rlcommonv3.RateLimitDescriptor {
	t.Helper()
	var kv []string
	for _, a := range rl.GetActions() {
		switch {
		case a.GetGenericKey() != nil:
			key := a.GetGenericKey().GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			kv = append(kv, key, a.GetGenericKey().GetDescriptorValue())
		case a.GetRemoteAddress() != nil:
			kv = append(kv, "remote_address", remote)
		case a.GetRequestHeaders() != nil:
			rh := a.GetRequestHeaders()
			kv = append(kv, rh.GetDescriptorKey(), headers[rh.GetHeaderName()])
		default:
			t.Fatalf("action %v: not modelled by this test", text(a))
		}
	}
	return desc(kv...)
}

// readYAML reads a YAML file into a message, through its JSON mapping.
func readYAML(t *testing.T, path string, m proto.Message) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
