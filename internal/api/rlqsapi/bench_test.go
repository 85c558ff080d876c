package rlqsapi_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// BenchmarkReportBuckets is one report of k buckets on one stream, over
// real gRPC, and the reply that answers every one of them: the daemon's
// CPU and memory per report of many buckets (ns/op and B/op are per
// report; per bucket divide by k).
func BenchmarkReportBuckets(b *testing.B) {
	for _, k := range []int{1, 100, 1000} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			d := daemontest.Start(b, policy)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := rlqsv3.NewRateLimitQuotaServiceClient(d.Dial(b)).StreamRateLimitQuotas(ctx)
			if err != nil {
				b.Fatal(err)
			}
			usages := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, k)
			for i := range usages {
				usages[i] = usage(10, time.Second, "name", "api", "user", "u"+strconv.Itoa(i))
			}
			exchange := func(domain string) {
				if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: usages}); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < k; {
					resp, err := s.Recv()
					if err != nil {
						b.Fatal(err)
					}
					got += len(resp.GetBucketAction())
				}
			}
			exchange("shop")
			b.ReportAllocs()
			for b.Loop() {
				exchange("")
			}
		})
	}
}
