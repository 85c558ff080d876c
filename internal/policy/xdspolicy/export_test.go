package xdspolicy

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// Handle answers one response as a Client's stream would.
func Handle(t *testing.T, resp *discoveryv3.DiscoveryResponse, apply Apply) *discoveryv3.DiscoveryRequest {
	c, err := New(Config{Server: "unused:1", NodeID: "n"}, apply)
	if err != nil {
		t.Fatal(err)
	}
	return c.handle(resp)
}
