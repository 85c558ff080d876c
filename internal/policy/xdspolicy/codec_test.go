package xdspolicy

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func encodedResponse(t testing.TB, resources int) []byte {
	resp := &discoveryv3.DiscoveryResponse{VersionInfo: "7", Nonce: "n", TypeUrl: TypeURL}
	for range resources {
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: TypeURL, Value: []byte{0x0a, 0x01, 'x'}})
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBoundedCodec: a response of more resources than the bound is
// decoded without them, its version and nonce kept, one resource saying
// why in their place; one within the bound, and any other message, is
// decoded as the proto codec decodes it.
func TestBoundedCodec(t *testing.T) {
	c := newBoundedCodec(10)

	var over discoveryv3.DiscoveryResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(encodedResponse(t, 11))}, &over); err != nil {
		t.Fatal(err)
	}
	err := refusedBeforeDecoding(&over)
	if over.GetVersionInfo() != "7" || over.GetNonce() != "n" || over.GetTypeUrl() != TypeURL ||
		err == nil || err.Error() != "resources: 11, more than the limit of 10 (--max-policy-descriptors, a resource counted as one); not decoded" {
		t.Errorf("over the bound: version %q nonce %q type %q, refusal %v", over.GetVersionInfo(), over.GetNonce(), over.GetTypeUrl(), err)
	}

	var within, want discoveryv3.DiscoveryResponse
	b := encodedResponse(t, 10)
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &within); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&within, &want) || refusedBeforeDecoding(&within) != nil {
		t.Errorf("within the bound: %v, want %v", &within, &want)
	}

	var bad discoveryv3.DiscoveryResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x05, 0x00})}, &bad); err == nil {
		t.Error("malformed response decoded")
	}

	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, VersionInfo: "7"}
	enc, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got discoveryv3.DiscoveryRequest
	if err := c.Unmarshal(enc, &got); err != nil || !proto.Equal(&got, req) {
		t.Errorf("request round trip: %v, %v", &got, err)
	}
	if c.Name() != "proto" {
		t.Errorf("codec name %q, want proto (the content subtype)", c.Name())
	}
}

// BenchmarkResponseOfTinyResources decodes a 4 MiB response of 2 million
// empty resources, as gRPC's proto codec would and as the Client's
// boundedCodec does with the default bound (B/op is the point).
func BenchmarkResponseOfTinyResources(b *testing.B) {
	resp := make([]byte, 0, 4<<20)
	for len(resp)+2 <= 4<<20 {
		resp = append(resp, 0x12, 0x00) // resources: an empty Any
	}
	for _, bc := range []struct {
		name  string
		codec encoding.CodecV2
	}{
		{"proto", encoding.GetCodecV2("proto")},
		{"bounded", newBoundedCodec(100_000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r discoveryv3.DiscoveryResponse
				if err := bc.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(resp)}, &r); err != nil {
					b.Fatal(err)
				}
				if bc.name == "bounded" && !strings.Contains(refusedBeforeDecoding(&r).Error(), "2097152") {
					b.Fatal("not refused")
				}
			}
		})
	}
}
