package envoyapi

import (
	"context"
	"regexp"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// fuzzPolicy has small limits, so that fuzzed requests are denied too,
// and a shadow rule.
const fuzzPolicy = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2, name: k}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket, burst: 4}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1, algorithm: leaky_bucket_queue, burst: 2}
  - key: s
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
`

// fieldName is how every InvalidArgument message starts: the field, in
// Envoy's names.
var fieldName = regexp.MustCompile(`^(domain|descriptors(\[\d+\](\.entries(\[\d+\]\.(key|value))?|\.limit(\.(unit|unit_multiplier|requests_per_unit))?)?)?): \S`)

// FuzzShouldRateLimit sends any request that decodes through the Envoy v3
// adapter (with the draft headers) to an engine on the memory store: the
// answer is InvalidArgument naming a field, or a response with one status
// per descriptor, OVER_LIMIT overall exactly when a status is, and a
// refund's status always OK (a refund never denies). Run longer
// with
//
//	go test -run '^$' -fuzz '^FuzzShouldRateLimit$' -fuzztime 60s ./internal/api/envoyapi/
func FuzzShouldRateLimit(f *testing.F) {
	desc := func(kv ...string) *rlcommonv3.RateLimitDescriptor {
		d := &rlcommonv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	override := desc("k", "o")
	override.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)}
	peek := desc("k", "a")
	peek.HitsAddend = wrapperspb.UInt64(0)
	refund := desc("k", "a")
	refund.IsNegativeHits = true
	for _, r := range []*rlsv3.RateLimitRequest{
		{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("k", "a")}},
		{Domain: "d", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("path", "/o", "user", "u"), desc("s", "x"), desc("free", "y")}},
		{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{override, peek}},
		{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{refund}},
		{Domain: "", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("", "")}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	p, err := config.Parse("d.yaml", []byte(fuzzPolicy))
	if err != nil {
		f.Fatal(err)
	}
	clk := clock.NewFake(1_700_000_040 * int64(time.Second))
	s := &Server{engine: engine.New(p, memory.New(clk, memory.WithMaxBuckets(10_000))), headers: HeadersDraft}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := &rlsv3.RateLimitRequest{}
		if proto.Unmarshal(b, in) != nil {
			return // grpcdecode answers these before the adapter
		}
		clk.Advance(10 * time.Millisecond)
		out, err := s.ShouldRateLimit(context.Background(), in)
		if err != nil {
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !fieldName.MatchString(st.Message()) {
				t.Fatalf("%v: %v %q, want InvalidArgument naming a field", in, st.Code(), st.Message())
			}
			return
		}
		if len(out.Statuses) != len(in.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(out.Statuses), len(in.Descriptors))
		}
		over := false
		for i, st := range out.Statuses {
			over = over || st.Code == rlsv3.RateLimitResponse_OVER_LIMIT
			if in.Descriptors[i].GetIsNegativeHits() && st.Code != rlsv3.RateLimitResponse_OK {
				t.Fatalf("refund descriptors[%d] answered %v", i, st)
			}
		}
		if over != (out.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Fatalf("overall %v with statuses %v", out.OverallCode, out.Statuses)
		}
	})
}
