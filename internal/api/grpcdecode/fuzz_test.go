package grpcdecode_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcdecode"
)

// FuzzDecode decodes arbitrary bytes as a ratelimit.v1 request through
// the Decoder's codec and interceptor: the codec never fails and never
// panics; the interceptor passes exactly the bytes protobuf decodes, with
// the same message, and answers the rest InvalidArgument naming the message
// type — and a field path only when protobuf's complaint is invalid UTF-8.
// Run longer with
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 60s ./internal/api/grpcdecode/
func FuzzDecode(f *testing.F) {
	valid, _ := proto.Marshal(&ratelimitv1.ShouldRateLimitRequest{Domain: "d", Hits: 2, Descriptors: []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "k", Value: "v"}}, Limit: &ratelimitv1.Limit{Name: "n", Requests: 1}}}})
	f.Add(valid)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})                         // domain not UTF-8
	f.Add([]byte{0x12, 0x06, 0x0a, 0x04, 0x12, 0x02, 0xc3, 0x28}) // descriptors[0].entries[0].value
	f.Add([]byte{0x0a, 0x10, 'd'})                                // truncated
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	dec := grpcdecode.New()
	codec, check := dec.Codec(), dec.Check()
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(ratelimitv1.ShouldRateLimitRequest)
		wantErr := proto.Unmarshal(b, want)
		m := new(ratelimitv1.ShouldRateLimitRequest)
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil {
			t.Fatalf("the codec failed: %v", err)
		}
		err := check(m)
		if wantErr == nil {
			if err != nil || !proto.Equal(m, want) {
				t.Fatalf("decodable %x: %v, %v; want %v", b, err, m, want)
			}
			return
		}
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "request ratelimit.v1.ShouldRateLimitRequest: ") {
			t.Fatalf("undecodable %x (%v): %v", b, wantErr, err)
		}
		if strings.HasSuffix(st.Message(), ": invalid UTF-8") != strings.Contains(wantErr.Error(), "UTF-8") {
			t.Fatalf("undecodable %x (%v): %q", b, wantErr, st.Message())
		}
		if !proto.Equal(m, new(ratelimitv1.ShouldRateLimitRequest)) {
			t.Fatalf("undecodable %x: the message holds %v, want it empty", b, m)
		}
		if check(m) != nil {
			t.Fatal("the error was given twice")
		}
	})
}
