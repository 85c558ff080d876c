package config

import (
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// nested returns a resource of one chain of descriptors depth deep, the
// last with a limit.
func nested(depth int) *rlsconfv3.RateLimitConfig {
	d := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
	for range depth - 1 {
		d = &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	return &rlsconfv3.RateLimitConfig{Name: "n", Domain: "n", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
}

// nestedYAML is nested(depth) as a policy file.
func nestedYAML(depth int) string {
	return "domain: n\ndescriptors: " + strings.Repeat("[{key: k, descriptors: ", depth-1) +
		"[{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]" + strings.Repeat("}]", depth-1) + "\n"
}

func TestCountDescriptors(t *testing.T) {
	wide := &rlsconfv3.RateLimitConfig{Name: "w", Domain: "w"}
	for range 10 {
		wide.Descriptors = append(wide.Descriptors, gatewayConfig().Descriptors...) // 3 each
	}
	deepSecond := nested(MaxDepth + 1)
	deepSecond.Descriptors = append(gatewayConfig().Descriptors, deepSecond.Descriptors...)
	for _, tc := range []struct {
		name string
		c    *rlsconfv3.RateLimitConfig
		max  int
		want int
		err  string
	}{
		{"gateway", gatewayConfig(), 100, 3, ""},
		{"every field", everyFieldConfig(), 100, 5, ""},
		{"wide", wide, 100, 30, ""},
		{"stops past max", wide, 7, 8, ""},
		{"MaxDepth deep", nested(MaxDepth), 100, MaxDepth, ""},
		{"deeper", nested(MaxDepth + 1), 100, MaxDepth, "descriptors[0]: descriptors nested more than 64 deep below it"},
		{"deeper, second", deepSecond, 1000, 3 + MaxDepth, "descriptors[1]: descriptors nested more than 64 deep below it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			n, err := CountDescriptors(b, tc.max)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			if n != tc.want {
				t.Errorf("%d descriptors, want %d", n, tc.want)
			}
		})
	}
	for _, b := range [][]byte{{0x1a}, {0x1a, 0x05, 0x0a}, {0xff}} {
		if _, err := CountDescriptors(b, 100); err != errMalformed {
			t.Errorf("CountDescriptors(%x): %v, want %v", b, err, errMalformed)
		}
	}
}

// TestMaxDepth: a policy nests descriptors MaxDepth deep and no deeper,
// from a file and over xDS alike.
func TestMaxDepth(t *testing.T) {
	if _, err := Parse("deep.yaml", []byte(nestedYAML(MaxDepth))); err != nil {
		t.Errorf("%d deep: %v", MaxDepth, err)
	}
	if _, err := FromRateLimitConfigs([]RateLimitConfig{{Config: nested(MaxDepth)}}, DefaultPolicyBounds); err != nil {
		t.Errorf("%d deep over xDS: %v", MaxDepth, err)
	}
	path := "descriptors[0]" + strings.Repeat(".descriptors[0]", MaxDepth)
	_, err := Parse("deep.yaml", []byte(nestedYAML(MaxDepth+1)))
	if want := "deep.yaml:2: " + path + ": nested more than 64 deep"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%d deep: %v, want %q", MaxDepth+1, err, want)
	}
	_, err = FromRateLimitConfigs([]RateLimitConfig{{Config: nested(MaxDepth + 1)}}, DefaultPolicyBounds)
	if want := "xds:n: " + path + ": nested more than 64 deep"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%d deep over xDS: %v, want %q", MaxDepth+1, err, want)
	}
}

// FuzzRateLimitConfig decodes arbitrary bytes as a RateLimitConfig
// resource, as xdspolicy does: CountDescriptors, which reads the wire
// format without decoding, must agree with the decoder — never calling
// malformed what it decodes, and counting exactly its descriptors unless
// they nest deeper than MaxDepth — and FromRateLimitConfigs must return a
// policy or problems, never panic.
func FuzzRateLimitConfig(f *testing.F) {
	withUnknown := everyFieldConfig()
	withUnknown.Descriptors[0].ProtoReflect().SetUnknown([]byte{0x48, 0x01}) // field 9, varint 1
	for _, c := range []*rlsconfv3.RateLimitConfig{gatewayConfig(), everyFieldConfig(), nested(3), nested(MaxDepth + 1), withUnknown} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x1a, 0x02, 0x20, 0x00}) // a descriptor whose descriptors field is a varint
	f.Fuzz(func(t *testing.T, b []byte) {
		n, countErr := CountDescriptors(b, 1<<30)
		var c rlsconfv3.RateLimitConfig
		if proto.Unmarshal(b, &c) != nil {
			return
		}
		want := 0
		var count func([]*rlsconfv3.RateLimitDescriptor)
		count = func(ds []*rlsconfv3.RateLimitDescriptor) {
			for _, d := range ds {
				want++
				count(d.GetDescriptors())
			}
		}
		count(c.GetDescriptors())
		switch {
		case countErr == errMalformed:
			t.Fatalf("CountDescriptors calls malformed what the decoder decodes: %v", &c)
		case countErr != nil && !strings.Contains(countErr.Error(), "nested more than"):
			t.Fatalf("CountDescriptors: %v", countErr)
		case countErr == nil && n != want:
			t.Fatalf("CountDescriptors counted %d descriptors, the decoder %d", n, want)
		}
		if countErr != nil {
			return
		}
		p, err := FromRateLimitConfigs([]RateLimitConfig{{Config: &c}}, DefaultPolicyBounds)
		if (p == nil) == (err == nil) {
			t.Fatalf("policy %v and error %v", p, err)
		}
	})
}
