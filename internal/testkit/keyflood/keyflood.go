// Package keyflood sends a daemon distinct descriptor values, each in a
// bucket of its own, as fast as it answers: the key flood of
// cmd/ratelimitd's TestKeyFlood. Requests are encoded by hand into reused
// buffers and sent as they are, so that the client costs little beside the
// daemon; its command, floodclient, runs it in a process of its own, built
// without the race detector, while the test watches the daemon.
//
// The two APIs' requests share their field numbers: domain 1, descriptors
// 2 (entries 1 (key 1, value 2)), and the request's hits (hits_addend) 3;
// a ratelimit.v1 descriptor's limit is its field 3. Both responses carry
// overall_code in field 1, where 1 is OK.
package keyflood

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// PerRequest is how many descriptors a request carries.
const PerRequest = 64

// MaxValueLen is the longest value a Request sends.
const MaxValueLen = 1024

// Request says what each request of a flood is.
type Request struct {
	Method  string // the gRPC method, v1's or Envoy v3's ShouldRateLimit
	Entries int    // entries (values) per descriptor; with more than one, each has a key of Keys
	Hits    uint32 // the request's hits, when not 0
	Limit   []byte // each descriptor's encoded v1 limit, when not nil
	// ValueLen is the length of a value, 1 to MaxValueLen: its number in
	// decimal, then filler.
	ValueLen int
}

// Keys are the entry keys of a descriptor of several entries: 256 bytes
// each.
var Keys = func() []string {
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("%0256d", i)
	}
	return keys
}()

// Encode appends to b the request, in domain "default", whose values are
// numbered from first, using scratch for the descriptors, and returns it.
func (r Request) Encode(b, scratch []byte, first int64) []byte {
	var value [MaxValueLen]byte
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "default")
	if r.Hits != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.Hits))
	}
	n := first
	for range PerRequest {
		d := scratch[:0]
		for e := range r.Entries {
			key := "path"
			if r.Entries > 1 {
				key = Keys[e]
			}
			strconv.AppendInt(value[:0], n, 10) // the number, then filler
			n++
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendVarint(d, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(key))+protowire.SizeTag(2)+protowire.SizeBytes(r.ValueLen)))
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendString(d, key)
			d = protowire.AppendTag(d, 2, protowire.BytesType)
			d = protowire.AppendBytes(d, value[:r.ValueLen])
		}
		if r.Limit != nil {
			d = protowire.AppendTag(d, 3, protowire.BytesType)
			d = protowire.AppendBytes(d, r.Limit)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
		scratch = d
	}
	return b
}

// Send sends values distinct values (rounded down to whole requests) in
// requests r encodes, from senders goroutines, and returns the first
// error: a failed call, or an answer other than OK (every bucket is new,
// so every request must be admitted).
func Send(ctx context.Context, conn *grpc.ClientConn, r Request, values, senders int) error {
	requests := values / r.Entries / PerRequest
	var next atomic.Int64
	errs := make(chan error, senders)
	for range senders {
		go func() {
			var req, scratch []byte
			var resp rawMessage
			for {
				i := next.Add(1) - 1
				if i >= int64(requests) {
					errs <- nil
					return
				}
				req = r.Encode(req[:0], scratch, i*int64(PerRequest*r.Entries))
				msg := rawMessage(req)
				if err := conn.Invoke(ctx, r.Method, &msg, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
				if code, err := varintField(resp, 1); err != nil || code != 1 {
					errs <- fmt.Errorf("request %d: overall code %d (%v), want OK: every bucket is new", i, code, err)
					return
				}
			}
		}()
	}
	var first error
	for range senders {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// rawMessage is an encoded protobuf message, sent and received as it is.
type rawMessage []byte

// rawCodec passes rawMessages through gRPC unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*rawMessage), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*rawMessage) = append((*v.(*rawMessage))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// varintField returns the varint field num of the encoded message b (0
// when absent, as proto3 leaves a zero value out).
func varintField(b []byte, num protowire.Number) (uint64, error) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b)
			return v, protowire.ParseError(min(l, 0))
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return 0, nil
}
