package loadgen

import (
	"context"
	"fmt"

	envoycommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	envoyrls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// API names the service a run calls.
type API string

const (
	// APIv1 is ratelimit.v1.RateLimitService/ShouldRateLimit.
	APIv1 API = "v1"
	// APIEnvoy is envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit,
	// which ratelimitd, envoyproxy/ratelimit and any RLS server answer.
	APIEnvoy API = "envoy"
)

// ParseAPI accepts "v1" and "envoy" (also "ratelimit.v1" and "envoy.v3").
func ParseAPI(s string) (API, error) {
	switch s {
	case "v1", "ratelimit.v1":
		return APIv1, nil
	case "envoy", "envoy.v3":
		return APIEnvoy, nil
	}
	return "", fmt.Errorf("api %q: want v1 or envoy", s)
}

// Outcome is what became of one request.
type Outcome int

const (
	// Admitted: the overall code was OK.
	Admitted Outcome = iota
	// Denied: the overall code was OVER_LIMIT and no descriptor was over
	// capacity.
	Denied
	// OverCapacity: a descriptor's cost exceeds its limit's capacity
	// (ratelimit.v1 CODE_OVER_CAPACITY; the Envoy API has no such code and
	// reports these as Denied).
	OverCapacity
	// Failed: the call returned an error, or an overall code that is
	// neither OK nor OVER_LIMIT.
	Failed
	numOutcomes
)

// caller sends one request and classifies the answer.
type caller func(ctx context.Context, cc grpc.ClientConnInterface, req request) (Outcome, error)

func (a API) caller() caller {
	if a == APIEnvoy {
		return callEnvoy
	}
	return callV1
}

func callV1(ctx context.Context, cc grpc.ClientConnInterface, req request) (Outcome, error) {
	m := &ratelimitv1.ShouldRateLimitRequest{Domain: req.domain, Hits: req.hits, Descriptors: make([]*ratelimitv1.Descriptor, len(req.descriptors))}
	for i, d := range req.descriptors {
		entries := make([]*ratelimitv1.Entry, len(d.entries))
		for j, e := range d.entries {
			entries[j] = &ratelimitv1.Entry{Key: e.key, Value: e.value}
		}
		m.Descriptors[i] = &ratelimitv1.Descriptor{Entries: entries, Hits: d.hits}
	}
	resp, err := ratelimitv1.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, m)
	if err != nil {
		return Failed, err
	}
	switch resp.GetOverallCode() {
	case ratelimitv1.Code_CODE_OK:
		return Admitted, nil
	case ratelimitv1.Code_CODE_OVER_LIMIT:
		for _, s := range resp.GetStatuses() {
			if s.GetCode() == ratelimitv1.Code_CODE_OVER_CAPACITY {
				return OverCapacity, nil
			}
		}
		return Denied, nil
	}
	return Failed, fmt.Errorf("unexpected overall_code %v", resp.GetOverallCode())
}

func callEnvoy(ctx context.Context, cc grpc.ClientConnInterface, req request) (Outcome, error) {
	m := &envoyrls.RateLimitRequest{Domain: req.domain, HitsAddend: req.hits, Descriptors: make([]*envoycommon.RateLimitDescriptor, len(req.descriptors))}
	for i, d := range req.descriptors {
		entries := make([]*envoycommon.RateLimitDescriptor_Entry, len(d.entries))
		for j, e := range d.entries {
			entries[j] = &envoycommon.RateLimitDescriptor_Entry{Key: e.key, Value: e.value}
		}
		m.Descriptors[i] = &envoycommon.RateLimitDescriptor{Entries: entries}
		if d.hits != nil {
			m.Descriptors[i].HitsAddend = wrapperspb.UInt64(uint64(*d.hits))
		}
	}
	resp, err := envoyrls.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, m)
	if err != nil {
		return Failed, err
	}
	switch resp.GetOverallCode() {
	case envoyrls.RateLimitResponse_OK:
		return Admitted, nil
	case envoyrls.RateLimitResponse_OVER_LIMIT:
		return Denied, nil
	}
	return Failed, fmt.Errorf("unexpected overall_code %v", resp.GetOverallCode())
}
