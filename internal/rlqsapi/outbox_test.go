package rlqsapi

import (
	"strconv"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestOutbox: one action per bucket, the latest, in the order the buckets
// were first queued; take empties it.
func TestOutbox(t *testing.T) {
	st := &stream{wake: make(chan struct{}, 1), sent: make(chan struct{}, 1)}
	id := func(kv ...string) *rlqsv3.BucketId {
		b := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			b[kv[i]] = kv[i+1]
		}
		return &rlqsv3.BucketId{Bucket: b}
	}
	st.queue(blanketAction(id("a", "1", "b", "2"), typev3.RateLimitStrategy_ALLOW_ALL, 1))
	st.queue(blanketAction(id("a", "1"), typev3.RateLimitStrategy_ALLOW_ALL, 2))
	st.queue(blanketAction(id("b", "2", "a", "1"), typev3.RateLimitStrategy_DENY_ALL, 3)) // the first bucket again
	st.queue(blanketAction(id("a", "1 b=2"), typev3.RateLimitStrategy_ALLOW_ALL, 4))      // not the first bucket
	got := st.take()
	var ttls []int64
	for _, a := range got {
		ttls = append(ttls, a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration().Nanoseconds())
	}
	if len(ttls) != 3 || ttls[0] != 3 || ttls[1] != 2 || ttls[2] != 4 {
		t.Fatalf("taken: the actions of TTLs %v, want [3 2 4]", ttls)
	}
	if len(st.take()) != 0 {
		t.Fatal("take did not empty the outbox")
	}
}

// BenchmarkQueue: replacing a pending action on a stream that has n
// pending, per action: the same whatever n.
func BenchmarkQueue(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 30_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			actions := make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, n)
			for i := range actions {
				actions[i] = blanketAction(&rlqsv3.BucketId{Bucket: map[string]string{"rnd": strconv.Itoa(i)}}, typev3.RateLimitStrategy_ALLOW_ALL, 1)
			}
			st := &stream{wake: make(chan struct{}, 1)}
			for _, a := range actions {
				st.queue(a)
			}
			b.ResetTimer()
			for i := range b.N {
				st.queue(actions[i%n])
			}
		})
	}
}
