package rlqsapi

import (
	"fmt"
	"strconv"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

func actionsFor(k int, rule typev3.RateLimitStrategy_BlanketRule) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	as := make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, k)
	for i := range as {
		as[i] = blanketAction(&rlqsv3.BucketId{Bucket: map[string]string{"name": "api", "user": "u" + strconv.Itoa(i)}}, rule, 0)
	}
	return as
}

// TestQueueReplaces: an action queued for a bucket replaces the one
// pending for it (the same BucketId, whatever the map's order), and take
// returns each bucket's last, once.
func TestQueueReplaces(t *testing.T) {
	st := &stream{wake: make(chan struct{}, 1)}
	first, second := actionsFor(3, typev3.RateLimitStrategy_ALLOW_ALL), actionsFor(3, typev3.RateLimitStrategy_DENY_ALL)
	for _, a := range first {
		st.queue(a)
	}
	st.queue(second[1])
	st.queue(&rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": "u2", "name": "api"}},
		BucketAction: second[2].BucketAction})
	got := st.take()
	if len(got) != 3 {
		t.Fatalf("took %d actions, want 3", len(got))
	}
	for i, a := range got {
		rule := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule()
		if want := map[bool]typev3.RateLimitStrategy_BlanketRule{true: typev3.RateLimitStrategy_ALLOW_ALL, false: typev3.RateLimitStrategy_DENY_ALL}[i == 0]; rule != want {
			t.Errorf("action %d: %v, want %v", i, rule, want)
		}
	}
	if got := st.take(); len(got) != 0 {
		t.Fatalf("took %d more", len(got))
	}
}

// BenchmarkQueue is a report's k actions queued on a stream whose client
// is not reading, over k actions already pending for the same buckets
// (its previous report's): each replaces one.
func BenchmarkQueue(b *testing.B) {
	for _, k := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			as := actionsFor(k, typev3.RateLimitStrategy_ALLOW_ALL)
			st := &stream{wake: make(chan struct{}, 1)}
			for _, a := range as {
				st.queue(a)
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, a := range as {
					st.queue(a)
				}
			}
		})
	}
}
