package config

import (
	"errors"
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// MaxDepth is how deep descriptors may nest in a policy, a file's or an
// xDS resource's: a descriptor below MaxDepth others is a problem. (A rule
// MaxDepth deep matches requests of MaxDepth entries; requests carry at
// most --max-entries, 16 by default.)
const MaxDepth = 64

// The field numbers of the descriptor lists, in RateLimitConfig and in
// RateLimitDescriptor.
var (
	configDescriptors     = (&rlsconfv3.RateLimitConfig{}).ProtoReflect().Descriptor().Fields().ByName("descriptors").Number()
	descriptorDescriptors = (&rlsconfv3.RateLimitDescriptor{}).ProtoReflect().Descriptor().Fields().ByName("descriptors").Number()
)

// errMalformed is the problem of a resource whose wire format cannot be
// walked; decoding it would fail too.
var errMalformed = errors.New("malformed RateLimitConfig: not the protobuf wire format")

// CountDescriptors returns how many descriptors the RateLimitConfig
// resource encoded in b holds, nested ones included, reading its wire
// format without decoding it (no allocation; a recursion at most MaxDepth
// deep), so that a resource beyond a policy's bounds is refused before it
// costs the memory of its decoded form, many times its size. It stops
// counting past max, returning max+1. It returns an error naming the
// bound when descriptors nest deeper than MaxDepth (naming the top-level
// descriptor they are under), and for bytes that are not the wire format.
// Fields other than the descriptor lists are skipped, not checked:
// decoding checks them.
func CountDescriptors(b []byte, max int) (int, error) {
	w := wireWalk{max: max}
	err := w.list(b, configDescriptors, 0)
	return w.n, err
}

type wireWalk struct {
	n, max int
	top    int // the index of the top-level descriptor being walked
}

// list walks the message b, a RateLimitConfig (depth 0) or a descriptor
// depth levels deep, counting the descriptors of its list field.
func (w *wireWalk) list(b []byte, field protowire.Number, depth int) error {
	for index := 0; len(b) > 0 && w.n <= w.max; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if num != field || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errMalformed
			}
			b = b[n:]
			continue
		}
		d, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if depth == 0 {
			w.top = index
		}
		if depth == MaxDepth {
			return fmt.Errorf("descriptors[%d]: descriptors nested more than %d deep below it (the most a policy nests); not decoded", w.top, MaxDepth)
		}
		w.n++
		if err := w.list(d, descriptorDescriptors, depth+1); err != nil {
			return err
		}
		index++
	}
	return nil
}
