package rlqsapi

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
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
// reads none of its answers has at most MaxPending of them waiting, plus
// the one response its Send holds: its stream is no longer read.
func TestBacklogBounded(t *testing.T) {
	p, err := config.Parse("policy.yaml", []byte("domain: shop\ndescriptors:\n  - key: plan\n    value: gold\n    rate_limit: {unit: minute, requests_per_unit: 600}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := New(func() *config.Policy { return p }, clock.NewFake(0))
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
		select {
		case deaf.reports <- &rlqsv3.RateLimitQuotaUsageReports{Domain: "shop", BucketQuotaUsages: usages}:
		case <-time.After(time.Second): // not taken: the stream is no longer read
		}
	}
	s.mu.Lock()
	var st *stream
	for _, x := range s.streams {
		st = x
	}
	s.mu.Unlock()
	st.mu.Lock()
	pending := len(st.pending)
	st.mu.Unlock()
	if pending > MaxPending {
		t.Fatalf("%d answers wait for a client that reads none, want at most %d", pending, MaxPending)
	}
}
