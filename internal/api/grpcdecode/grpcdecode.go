// Package grpcdecode answers a gRPC request that cannot be decoded with
// InvalidArgument, through the server's interceptors, instead of the
// Internal error that grpc-go gives it before any interceptor runs.
//
// grpc-go decodes a unary request before it calls the interceptors, and
// fails the call with codes.Internal when the codec fails: a malformed
// message, or a string field that is not valid UTF-8 (proto3 requires it).
// Such a call is the client's fault, yet it would be reported as the
// server's, and no interceptor (metrics, logging) would see it.
//
// A Decoder fixes that in two parts that must be installed together on one
// server: a codec (ServerOption) that, when a message does not decode,
// leaves it empty, remembers why, and reports success; and interceptors
// (UnaryServerInterceptor, StreamServerInterceptor) that fail the call with
// InvalidArgument for a message so remembered, before any handler sees
// it. Interceptors installed before them (metrics) observe the
// InvalidArgument; those after them, and the handlers, never see the
// message.
//
// The error names the message type and the problem; for invalid UTF-8 it
// names the field by its path in the message, as the APIs name fields:
//
//	request ratelimit.v1.ShouldRateLimitRequest: descriptors[0].entries[1].value: invalid UTF-8
//	request envoy.service.ratelimit.v3.RateLimitRequest: cannot decode: proto: cannot parse invalid wire-format data
package grpcdecode

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec this one wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Decoder turns undecodable requests into InvalidArgument. Its zero value
// is not usable: call New. It is safe for concurrent use.
type Decoder struct {
	proto   encoding.CodecV2
	failed  sync.Map     // the message (a pointer) -> error, until an interceptor takes it
	pending atomic.Int64 // entries of failed, so that well-formed calls skip the lookup
}

// New returns a Decoder wrapping grpc-go's proto codec.
func New() *Decoder {
	return &Decoder{proto: encoding.GetCodecV2("proto")}
}

// ServerOption makes the server decode every message with d's codec
// (grpc.ForceServerCodecV2): protobuf, as usual, whatever the content
// subtype. Install it only together with d's interceptors.
func (d *Decoder) ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(codec{d}) }

// UnaryServerInterceptor fails a call whose request did not decode with
// InvalidArgument; other calls go on to handler.
func (d *Decoder) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := d.take(req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor makes a stream's RecvMsg return InvalidArgument
// for a message that did not decode.
func (d *Decoder) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &stream{ServerStream: ss, d: d})
	}
}

type stream struct {
	grpc.ServerStream
	d *Decoder
}

func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.d.take(m)
}

// take returns, and forgets, the InvalidArgument error for m when m did
// not decode; nil otherwise.
func (d *Decoder) take(m any) error {
	if d.pending.Load() == 0 {
		return nil
	}
	if err, ok := d.failed.LoadAndDelete(m); ok {
		d.pending.Add(-1)
		return err.(error)
	}
	return nil
}

// codec is grpc-go's proto codec, but for decoding failures.
type codec struct{ d *Decoder }

func (c codec) Name() string                           { return c.d.proto.Name() }
func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.d.proto.Marshal(v) }
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.d.proto.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err // not a protobuf message: nothing this package can name
	}
	c.d.pending.Add(1)
	c.d.failed.Store(v, invalidArgument(m, data.Materialize(), err))
	proto.Reset(m) // nothing half-decoded reaches anyone
	return nil
}

// invalidArgument returns the InvalidArgument error for the encoded message
// b of m's type, which failed to decode with err: it names the message type
// and, for invalid UTF-8, the field.
func invalidArgument(m proto.Message, b []byte, err error) error {
	md := m.ProtoReflect().Descriptor()
	if path := invalidUTF8(md, b, "", 0); path != "" {
		return status.Errorf(codes.InvalidArgument, "request %s: %s: invalid UTF-8", md.FullName(), path)
	}
	return status.Errorf(codes.InvalidArgument, "request %s: cannot decode: %v", md.FullName(), err)
}

// maxDepth bounds the recursion of invalidUTF8 as protobuf's own decoder
// bounds nesting.
const maxDepth = 100

// invalidUTF8 returns the path (descriptors[0].entries[1].value) of the
// first string field of b, an encoded message of md, that is not valid
// UTF-8, with prefix before it; "" when there is none, or when b is
// malformed before one is found (protobuf, which decodes in the same
// order, then reports the malformation). A map field's entries are named by
// their position ("labels[2].value").
func invalidUTF8(md protoreflect.MessageDescriptor, b []byte, prefix string, depth int) string {
	path, _ := walk(md, b, prefix, depth)
	return path
}

// walk is invalidUTF8, also reporting whether it stopped at malformed
// bytes (here or in a nested message).
func walk(md protoreflect.MessageDescriptor, b []byte, prefix string, depth int) (path string, malformed bool) {
	if depth > maxDepth {
		return "", true
	}
	seen := map[protowire.Number]int{} // occurrences so far, for indices
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber {
			// ConsumeTag accepts numbers up to 2^31-1; protobuf's decoder
			// refuses those above MaxValidNumber as malformed.
			return "", true
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", true
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", true
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue // an unknown field is kept as bytes, never checked
		}
		name := prefix + string(fd.Name())
		if fd.IsList() || fd.IsMap() {
			name += "[" + strconv.Itoa(seen[num]) + "]"
			seen[num]++
		}
		switch {
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return name, false
		case fd.Message() != nil:
			if p, bad := walk(fd.Message(), v, name+".", depth+1); p != "" || bad {
				return p, bad
			}
		}
	}
	return "", false
}
