package quota

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func tokenBucket(maxTokens, per uint32, fill, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: durationpb.New(ttl),
		RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(per), FillInterval: durationpb.New(fill),
		}}},
	}
}

func newBucket() *Bucket {
	c := &Client{start: time.Now(), fresh: make(chan struct{}, 1)}
	b := &Bucket{c: c, first: make(chan struct{})}
	b.subscribed.Store(true)
	return b
}

// TestCarryOver: a new assignment keeps the tokens left (at most its
// burst), where Envoy would start a full bucket; a first one starts full.
func TestCarryOver(t *testing.T) {
	b := newBucket()
	now := int64(time.Hour)
	b.apply(tokenBucket(10, 1, time.Second, time.Minute), now) // full: 10
	for range 7 {
		b.tat.Store(max(b.tat.Load(), now) + int64(time.Second)) // spend 7 at now
	}
	tokens := func(a *assignment) int64 { return (now + a.burst*a.every - max(b.tat.Load(), now)) / a.every }
	if got := tokens(b.assigned.Load()); got != 3 {
		t.Fatalf("after 7 of 10: %d tokens", got)
	}
	b.apply(tokenBucket(20, 1, 100*time.Millisecond, time.Minute), now)
	if got := tokens(b.assigned.Load()); got != 3 {
		t.Fatalf("carried over to a larger assignment: %d tokens, want 3", got)
	}
	b.apply(tokenBucket(2, 1, time.Second, time.Minute), now)
	if got := tokens(b.assigned.Load()); got != 2 {
		t.Fatalf("carried over to a burst of 2: %d tokens, want 2", got)
	}
}

// BenchmarkAllow is one local decision with an assignment in force (the
// bucket never runs dry: a token every nanosecond).
func BenchmarkAllow(b *testing.B) {
	bk := newBucket()
	bk.apply(tokenBucket(1<<30, 1000, time.Microsecond, time.Hour), bk.c.now())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		bk.Allow(ctx)
	}
}

// BenchmarkAllowDenied is a local decision that denies.
func BenchmarkAllowDenied(b *testing.B) {
	bk := newBucket()
	bk.apply(tokenBucket(1, 1, time.Hour, time.Hour), bk.c.now())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		bk.Allow(ctx)
	}
}

// TestAbandon: an abandon_action drops the assignment and stops the
// bucket's reports, as Envoy erases the bucket; its next Allow is decided
// by the fallback and reports it at once.
func TestAbandon(t *testing.T) {
	b := newBucket()
	now := b.c.now()
	b.apply(tokenBucket(1, 1, time.Hour, time.Hour), now)
	if !b.Allow(context.Background()) || b.Allow(context.Background()) {
		t.Fatal("the assignment (1 token) was not applied")
	}
	b.abandon()
	if b.subscribed.Load() {
		t.Fatal("an abandoned bucket is still reported")
	}
	if !b.Allow(context.Background()) {
		t.Fatal("an abandoned bucket's request was not decided by the fallback (allow)")
	}
	select {
	case <-b.c.fresh:
	default:
		t.Fatal("an abandoned bucket's next request was not reported at once")
	}
	if !b.subscribed.Load() {
		t.Fatal("an abandoned bucket's next request did not subscribe it again")
	}
}
