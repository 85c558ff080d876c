package envoyfilter_test

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/internal/testkit/envoyfilter"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

func at(d time.Duration) int64 { return t0 + int64(d) }

func tokenBucket(maxTokens, perFill uint32, fill, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return action(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)}}}, ttl)
}

func blanket(rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return action(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, ttl)
}

func action(s *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: s}}}
}

var abandon = &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
	AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}

// step is a request (want: admitted) or an action received, at a time.
type step struct {
	at      time.Duration
	receive *rlqsv3.RateLimitQuotaResponse_BucketAction
	want    string // a request's outcome: "allow", "deny", "allow first", "allow unassigned", ...
}

// TestFilter: the filter's arithmetic, as Envoy's source has it.
func TestFilter(t *testing.T) {
	deny := typev3.RateLimitStrategy_DENY_ALL
	for _, tc := range []struct {
		name  string
		cfg   envoyfilter.Config
		steps []step
	}{
		{"the first request: no_assignment_behavior (allow), reported at once", envoyfilter.Config{}, []step{
			{0, nil, "allow first"}, {time.Millisecond, nil, "allow unassigned"}}},
		{"no_assignment_behavior deny", envoyfilter.Config{NoAssignment: deny}, []step{
			{0, nil, "deny first"}, {time.Millisecond, nil, "deny unassigned"}}},
		{"a new token bucket starts full, refills tokens_per_fill per whole seconds", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, tokenBucket(2, 8, 2*time.Second, 5*time.Second), ""},
			{0, nil, "allow"}, {0, nil, "allow"}, {1, nil, "deny"}, // full: 2, then empty
			{250 * time.Millisecond, nil, "allow"}, {250 * time.Millisecond, nil, "deny"}, // 4 a second
			{2 * time.Second, nil, "allow"}, {2 * time.Second, nil, "allow"}, {2 * time.Second, nil, "deny"}, // at most 2
		}},
		{"a fill interval under a second is 0 seconds: no limit", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, tokenBucket(1, 1, 500*time.Millisecond, 5*time.Second), ""},
			{1, nil, "allow"}, {2, nil, "allow"}, {3, nil, "allow"}, {4, nil, "allow"},
		}},
		{"an equal assignment keeps the bucket; another starts a new, full one", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, tokenBucket(1, 1, time.Second, 5*time.Second), ""},
			{1, nil, "allow"}, {2, nil, "deny"},
			{3, tokenBucket(1, 1, time.Second, 5*time.Second), ""}, {4, nil, "deny"}, // kept: empty
			{5, tokenBucket(1, 1, 2*time.Second, 5*time.Second), ""}, {6, nil, "deny"}, // only the nanoseconds are compared
			{7, tokenBucket(1, 2, time.Second, 5*time.Second), ""}, {8, nil, "allow"}, {9, nil, "deny"}, // new: full
		}},
		{"the TTL's whole seconds only: 1.9s is 1s, 900ms expires at once", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, blanket(deny, 1900*time.Millisecond), ""},
			{time.Second - 1, nil, "deny"}, {time.Second, nil, "allow unassigned"},
			{2 * time.Second, blanket(deny, 900*time.Millisecond), ""}, {2 * time.Second, nil, "allow unassigned"},
		}},
		{"each assignment re-arms the expiry", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, blanket(deny, 2*time.Second), ""}, {1500 * time.Millisecond, blanket(deny, 2*time.Second), ""},
			{3 * time.Second, nil, "deny"}, {3500 * time.Millisecond, nil, "allow unassigned"},
		}},
		{"expired_assignment_behavior for its time, then no_assignment_behavior", envoyfilter.Config{Expired: &deny, ExpiredFor: 10 * time.Second}, []step{
			{0, nil, "allow first"},
			{0, tokenBucket(5, 5, time.Second, 2*time.Second), ""},
			{2 * time.Second, nil, "deny unassigned"}, {12*time.Second - 1, nil, "deny unassigned"}, {12 * time.Second, nil, "allow unassigned"},
		}},
		{"after expiry an equal token bucket is new: full", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, tokenBucket(1, 1, time.Second, time.Second), ""},
			{1, nil, "allow"}, {2, nil, "deny"},
			{time.Second, tokenBucket(1, 1, time.Second, time.Second), ""}, {time.Second, nil, "allow"},
		}},
		{"a blanket rule drops the token bucket", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, tokenBucket(1, 1, time.Second, 5*time.Second), ""}, {1, nil, "allow"},
			{2, blanket(typev3.RateLimitStrategy_ALLOW_ALL, 5*time.Second), ""}, {3, nil, "allow"},
			{4, tokenBucket(1, 1, time.Second, 5*time.Second), ""}, {5, nil, "allow"}, {6, nil, "deny"},
		}},
		{"abandon_action erases the bucket: the next request is its first again", envoyfilter.Config{}, []step{
			{0, nil, "allow first"},
			{0, blanket(deny, 5*time.Second), ""}, {1, nil, "deny"},
			{2, abandon, ""}, {3, nil, "allow first"}, {4, nil, "allow unassigned"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := envoyfilter.New(tc.cfg, t0)
			for i, s := range tc.steps {
				if s.receive != nil {
					f.Receive(s.receive, at(s.at))
					continue
				}
				ok, first, assigned := f.Request(at(s.at))
				got := map[bool]string{true: "allow", false: "deny"}[ok]
				if first {
					got += " first"
				} else if !assigned {
					got += " unassigned"
				}
				if got != s.want {
					t.Fatalf("step %d at %v: %s, want %s", i, s.at, got, s.want)
				}
			}
		})
	}
}

// TestReport: usage since the last report, time_elapsed truncated to whole
// seconds; nothing for a bucket not in the cache.
func TestReport(t *testing.T) {
	f := envoyfilter.New(envoyfilter.Config{}, t0)
	id := map[string]string{"k": "v"}
	if u := f.Report(id, t0); u != nil {
		t.Fatalf("a bucket never seen reported: %v", u)
	}
	f.Request(t0)
	u := f.Report(id, t0) // the immediate report
	if u.GetNumRequestsAllowed() != 1 || u.GetTimeElapsed().AsDuration() != 0 {
		t.Fatalf("first report %v", u)
	}
	f.Receive(blanket(typev3.RateLimitStrategy_DENY_ALL, 5*time.Second), t0)
	f.Request(t0 + 1)
	f.Request(t0 + 2)
	if u = f.Report(id, at(1999*time.Millisecond)); u.GetNumRequestsDenied() != 2 || u.GetTimeElapsed().AsDuration() != time.Second {
		t.Fatalf("second report %v, want 2 denied in 1s (1.999s truncated)", u)
	}
}
