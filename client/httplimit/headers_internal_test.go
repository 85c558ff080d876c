package httplimit

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// st is a matched status of a token bucket named name.
func st(name string, code ratelimitv1.Code, remaining uint64, retry time.Duration) *ratelimitv1.DescriptorStatus {
	s := &ratelimitv1.DescriptorStatus{
		Code: code, Matched: true, Remaining: remaining, ResetAfter: durationpb.New(1500 * time.Millisecond),
		Rule: &ratelimitv1.Rule{Name: name, Requests: 600, Period: durationpb.New(time.Minute), Burst: 800},
	}
	if retry > 0 {
		s.RetryAfter = durationpb.New(retry)
	}
	return s
}

const (
	ok       = ratelimitv1.Code_CODE_OK
	over     = ratelimitv1.Code_CODE_OVER_LIMIT
	overCapy = ratelimitv1.Code_CODE_OVER_CAPACITY
)

func TestRateLimitHeaders(t *testing.T) {
	shadow := st("shadow", over, 0, time.Hour)
	shadow.Shadow = true
	unlimited := st("unlimited", ok, 0, 0)
	unlimited.Rule = &ratelimitv1.Rule{Name: "unlimited", Unlimited: true}
	unmatched := &ratelimitv1.DescriptorStatus{Code: ok}
	window := st("window", ok, 5, 0)
	window.Rule.Burst = 0
	window.Rule.Requests = 7 // 7 per minute: w is the window's 60s
	oneThird := st("one-third", ok, 1, 0)
	oneThird.Rule = &ratelimitv1.Rule{Name: "one-third", Requests: 3, Period: durationpb.New(time.Second), Burst: 1} // 333.33..ms

	tests := []struct {
		name       string
		d          client.Decision
		ds         []client.Descriptor
		wantPolicy string
		wantLimit  string
	}{
		{"fewest remaining", service(ok, 2, st("a", ok, 10, 0), st("b", ok, 3, 0), st("c", ok, 3, 0)), nil,
			`"b";q=800;w=80`, `"b";r=3;t=2`},
		{"a denial beats remaining", service(over, 2, st("a", ok, 0, 0), st("b", over, 0, time.Second)), nil,
			`"b";q=800;w=80`, `"b";r=0;t=2`},
		{"the longest denial", service(over, 2, st("a", over, 0, time.Second), st("b", over, 0, 2*time.Second), st("c", over, 0, 2*time.Second)), nil,
			`"b";q=800;w=80`, `"b";r=0;t=2`},
		{"over capacity beats a denial", service(over, 2, st("a", over, 0, time.Hour), st("b", overCapy, 0, 0)), nil,
			`"b";q=800;w=80`, `"b";r=0;t=2`},
		{"shadow, unlimited and unmatched never count", service(ok, 4, shadow, unlimited, unmatched, st("d", ok, 9, 0)), nil,
			`"d";q=800;w=80`, `"d";r=9;t=2`},
		{"none counts: no headers", service(ok, 0, shadow, unmatched), nil, "", ""},
		{"a window: q is its requests, w its length", service(ok, 1, window), nil, `"window";q=7;w=60`, `"window";r=5;t=2`},
		{"w rounds up", service(ok, 1, oneThird), nil, `"one-third";q=1;w=1`, `"one-third";r=1;t=2`},
		{"no name: the descriptor's entries", service(ok, 1, st("", ok, 1, 0)),
			[]client.Descriptor{client.NewDescriptor("path", "/a").With("user", "u")},
			`"path=/a, user=u";q=800;w=80`, `"path=/a, user=u";r=1;t=2`},
		{"quotes escaped", service(ok, 1, st(`say "hi" \o/`, ok, 1, 0)), nil,
			`"say \"hi\" \\o/";q=800;w=80`, `"say \"hi\" \\o/";r=1;t=2`},
		{"not printable ASCII: default", service(ok, 1, st("café", ok, 1, 0)), nil, `"default";q=800;w=80`, `"default";r=1;t=2`},
		{"local denial", client.Decision{Source: client.SourceLocal, Policy: "p", RetryAfter: 1200 * time.Millisecond}, nil,
			"", `"p";r=0;t=2`},
		{"fail open", client.Decision{Allowed: true, Source: client.SourceFailOpen}, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			setRateLimit(h, tt.d, tt.ds)
			if p, l := h.Get("RateLimit-Policy"), h.Get("RateLimit"); p != tt.wantPolicy || l != tt.wantLimit {
				t.Errorf("RateLimit-Policy %q RateLimit %q\nwant             %q           %q", p, l, tt.wantPolicy, tt.wantLimit)
			}
		})
	}
}

// service is the service's answer: code, statuses, and the status it
// names most restrictive (1 + its index; 0 for none), as the daemon would
// name it for these statuses (the headers describe the status it names).
func service(code ratelimitv1.Code, most uint32, sts ...*ratelimitv1.DescriptorStatus) client.Decision {
	return client.Decision{
		Allowed:  code == ok,
		Source:   client.SourceService,
		Response: &ratelimitv1.ShouldRateLimitResponse{OverallCode: code, Statuses: sts, MostRestrictive: most},
	}
}
