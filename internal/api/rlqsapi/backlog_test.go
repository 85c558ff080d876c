package rlqsapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/internal/api/rlqsapi"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// deafStream is the server's side of a stream whose client sends reports
// and never reads: Send blocks until the stream ends.
type deafStream struct {
	grpc.ServerStream
	ctx     context.Context
	reports chan *rlqsv3.RateLimitQuotaUsageReports
}

func (d *deafStream) Context() context.Context    { return d.ctx }
func (d *deafStream) SetHeader(metadata.MD) error { return nil }
func (d *deafStream) Send(*rlqsv3.RateLimitQuotaResponse) error {
	<-d.ctx.Done()
	return d.ctx.Err()
}
func (d *deafStream) Recv() (*rlqsv3.RateLimitQuotaUsageReports, error) {
	select {
	case r := <-d.reports:
		return r, nil
	case <-d.ctx.Done():
		return nil, d.ctx.Err()
	}
}

// TestBacklogBounded: a client that sends reports of 30,000 BucketIds and
// reads none of its answers stops being read: the report being applied
// waits with quotaservice.MaxPending answers untaken (and one response in
// its Send), the next waits in the receiver, and the one after is not
// taken.
func TestBacklogBounded(t *testing.T) {
	p, err := config.Parse("policy.yaml", []byte("domain: shop\ndescriptors:\n  - key: plan\n    value: gold\n    rate_limit: {unit: minute, requests_per_unit: 600}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := rlqsapi.New(quotaservice.New(func() *config.Policy { return p }, clock.NewFake(0)))
	ctx, cancel := context.WithCancel(context.Background())
	deaf := &deafStream{ctx: ctx, reports: make(chan *rlqsv3.RateLimitQuotaUsageReports)}
	ended := make(chan error)
	go func() { ended <- s.StreamRateLimitQuotas(deaf) }()
	defer func() { cancel(); <-ended }()
	for r := range 3 {
		usages := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, 30_000)
		for i := range usages {
			usages[i] = &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:    &rlqsv3.BucketId{Bucket: map[string]string{"nomatch": strconv.Itoa(r) + "." + strconv.Itoa(i)}},
				TimeElapsed: durationpb.New(time.Second),
			}
		}
		wait := time.Minute // the first two are taken
		if r == 2 {
			wait = time.Second // not taken: the stream is no longer read
		}
		select {
		case deaf.reports <- &rlqsv3.RateLimitQuotaUsageReports{Domain: "shop", BucketQuotaUsages: usages}:
			if r == 2 {
				t.Fatal("a third report of 30,000 buckets was read from a client that reads no answer")
			}
		case <-time.After(wait):
			if r < 2 {
				t.Fatalf("report %d was not read", r)
			}
		}
	}
}
