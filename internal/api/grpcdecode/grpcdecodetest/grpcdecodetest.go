// Package grpcdecodetest sends gRPC requests that no generated client
// would — bytes as they are, a string field that is not UTF-8 — for tests
// of how a server answers a request it cannot decode (see grpcdecode).
package grpcdecodetest

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Raw is a gRPC client codec that passes messages through unchanged:
// Marshal takes a []byte and sends it as the message; Unmarshal sets a
// *[]byte to the whole message received. It is named "proto", so the server
// reads what it sends as protobuf. Use it for one call or stream with
// grpc.ForceCodecV2(Raw{}); any other message type panics.
type Raw struct{}

// Name returns "proto".
func (Raw) Name() string { return "proto" }

// Marshal returns v, a []byte, as one buffer, without copying it.
func (Raw) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

// Unmarshal sets *v, a *[]byte, to a copy of data.
func (Raw) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// Marshal returns the protobuf encoding of m; t fails if m cannot be
// encoded.
func Marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// NotUTF8 returns the protobuf encoding of m with marker replaced by as
// many 0xff bytes: m with one string field that is not UTF-8, which proto3
// forbids and no generated client sends. marker is put in that string field
// by the caller and must occur exactly once in the whole encoding; t fails
// otherwise.
func NotUTF8(t testing.TB, m proto.Message, marker string) []byte {
	t.Helper()
	b := Marshal(t, m)
	if bytes.Count(b, []byte(marker)) != 1 {
		t.Fatalf("marker %q not found once in %x", marker, b)
	}
	return bytes.Replace(b, []byte(marker), bytes.Repeat([]byte{0xff}, len(marker)), 1)
}
