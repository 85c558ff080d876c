package grpcapi

import (
	"context"
	"regexp"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// fuzzPolicy has small limits, so that fuzzed requests are denied too.
const fuzzPolicy = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket, burst: 4}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1, algorithm: leaky_bucket_queue, burst: 2}
  - key: q
    value: x*
    rate_limits:
      - {unit: second, requests_per_unit: 1, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 0}
`

// fieldName is how every InvalidArgument message starts: the field, in the
// API's names.
var fieldName = regexp.MustCompile(`^(domain|descriptors(\[\d+\](\.entries(\[\d+\]\.(key|value))?|\.limit(\.(name|algorithm|period))?|\.operation|\.overdraft|\.charged_at)?)?): \S`)

// FuzzShouldRateLimit sends any request that decodes through the v1
// adapter to an engine on the memory store: the answer is InvalidArgument
// naming a field, or a response with one status per descriptor whose
// overall code agrees with the statuses. Run longer with
//
//	go test -run '^$' -fuzz '^FuzzShouldRateLimit$' -fuzztime 60s ./internal/api/grpcapi/
func FuzzShouldRateLimit(f *testing.F) {
	sec := durationpb.New(time.Second)
	entries := func(kv ...string) *ratelimitv1.Descriptor {
		d := &ratelimitv1.Descriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv1.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	for _, r := range []*ratelimitv1.ShouldRateLimitRequest{
		{Domain: "d", Descriptors: []*ratelimitv1.Descriptor{entries("k", "a")}},
		{Domain: "d", Hits: 3, Descriptors: []*ratelimitv1.Descriptor{entries("path", "/o", "user", "u"), entries("k", "a")}},
		{Domain: "d", Descriptors: []*ratelimitv1.Descriptor{{Entries: entries("q", "xy").Entries, Hits: proto.Uint32(0)}}},
		{Domain: "other", Descriptors: []*ratelimitv1.Descriptor{{Entries: entries("k", "v").Entries,
			Limit: &ratelimitv1.Limit{Name: "n", Algorithm: ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Requests: 5, Period: sec, Burst: 9}}}},
		{Domain: "d", Descriptors: []*ratelimitv1.Descriptor{{Entries: entries("k", "v").Entries,
			Limit: &ratelimitv1.Limit{Algorithm: 99, Requests: 1, Period: durationpb.New(-time.Second)}}}},
		{Domain: "", Descriptors: []*ratelimitv1.Descriptor{entries("", "")}},
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
	s := &Server{engine: engine.New(p, memory.New(clk, memory.WithMaxBuckets(10_000)))}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := &ratelimitv1.ShouldRateLimitRequest{}
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
		denied := false
		for _, st := range out.Statuses {
			denied = denied || st.Code != ratelimitv1.Code_CODE_OK
		}
		if want := map[bool]ratelimitv1.Code{false: ratelimitv1.Code_CODE_OK, true: ratelimitv1.Code_CODE_OVER_LIMIT}[denied]; out.OverallCode != want {
			t.Fatalf("overall %v with statuses %v", out.OverallCode, out.Statuses)
		}
	})
}
