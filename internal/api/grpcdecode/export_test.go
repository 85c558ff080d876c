package grpcdecode

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
)

// InvalidUTF8 exposes invalidUTF8 for m's type to the tests.
func InvalidUTF8(m proto.Message, b []byte) string {
	return invalidUTF8(m.ProtoReflect().Descriptor(), b, "", 0)
}

// Codec returns d's codec, as ServerOption installs it.
func (d *Decoder) Codec() encoding.CodecV2 { return codec{d} }

// Check returns what the interceptors do with a received message: the
// InvalidArgument error remembered for it, once.
func (d *Decoder) Check() func(m any) error { return d.take }
