package xdspolicy

import (
	"errors"
	"fmt"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	_ "google.golang.org/grpc/encoding/proto" // registers the codec boundedCodec wraps
)

// refusedTypeURL is the type of the one resource boundedCodec puts in
// place of a response's resources when they are too many: its value says
// so, and the Client refuses the response with it.
const refusedTypeURL = "ratelimitd.invalid/refused-before-decoding"

// resourcesField is DiscoveryResponse.resources' field number.
var resourcesField = (&discoveryv3.DiscoveryResponse{}).ProtoReflect().Descriptor().Fields().ByName("resources").Number()

// boundedCodec decodes the stream's messages as gRPC's proto codec does,
// but counts a DiscoveryResponse's resources in its wire format first:
// when they are more than max, the response is decoded without them, and
// one resource of type refusedTypeURL, saying why, takes their place. So
// a response of millions of tiny resources (2 million empty ones fit in
// 4 MiB, and would take ~240 MiB decoded) costs no more than its bytes
// before it is refused.
type boundedCodec struct {
	encoding.CodecV2
	max int
}

func newBoundedCodec(max int) boundedCodec {
	return boundedCodec{CodecV2: encoding.GetCodecV2("proto"), max: max}
}

func (c boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*discoveryv3.DiscoveryResponse)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	b := data.Materialize()
	n, kept, ok := withoutResources(b)
	if !ok || n <= c.max {
		return proto.Unmarshal(b, resp) // a malformed one: the decoder says what is wrong
	}
	if err := proto.Unmarshal(kept, resp); err != nil {
		return err
	}
	resp.Resources = []*anypb.Any{{TypeUrl: refusedTypeURL, Value: []byte(tooManyResources(n, c.max).Error())}}
	return nil
}

// withoutResources returns how many resources the encoded
// DiscoveryResponse b holds and b's other fields, encoded; ok is false
// when b is not the wire format.
func withoutResources(b []byte) (n int, kept []byte, ok bool) {
	for len(b) > 0 {
		num, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return 0, nil, false
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[tn:])
		if vn < 0 {
			return 0, nil, false
		}
		if num == resourcesField {
			n++
		} else {
			kept = append(kept, b[:tn+vn]...)
		}
		b = b[tn+vn:]
	}
	return n, kept, true
}

// tooManyResources is the refusal of a response of n resources, more than
// max.
func tooManyResources(n, max int) error {
	return fmt.Errorf("resources: %d, more than the limit of %d (--max-policy-descriptors, a resource counted as one); not decoded", n, max)
}

// refusedBeforeDecoding returns the refusal boundedCodec put in resp, nil
// when there is none.
func refusedBeforeDecoding(resp *discoveryv3.DiscoveryResponse) error {
	if rs := resp.GetResources(); len(rs) == 1 && rs[0].GetTypeUrl() == refusedTypeURL {
		return errors.New(string(rs[0].GetValue()))
	}
	return nil
}
