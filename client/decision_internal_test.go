package client

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

func TestFormatWaitRoundsUp(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0 ms"},
		{0, "0 ms"},
		{1, "1 ms"},
		{time.Millisecond, "1 ms"},
		{time.Millisecond + 1, "2 ms"},
		{120 * time.Millisecond, "120 ms"},
		{999*time.Millisecond + 1, "1000 ms"},
		{time.Second, "1 s"},
		{time.Second + 1, "2 s"},
		{1200 * time.Millisecond, "2 s"},
		{2 * time.Minute, "120 s"},
	}
	for _, tt := range tests {
		if got := formatWait(tt.d); got != tt.want {
			t.Errorf("formatWait(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// st is a matched status of a token bucket named name.
func st(name string, code ratelimitv1.Code, remaining uint64, retry time.Duration) *ratelimitv1.DescriptorStatus {
	s := &ratelimitv1.DescriptorStatus{
		Code: code, Matched: true, Remaining: remaining,
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

func shadowed(s *ratelimitv1.DescriptorStatus) *ratelimitv1.DescriptorStatus {
	s.Shadow = true
	return s
}

func delayed(s *ratelimitv1.DescriptorStatus, d time.Duration) *ratelimitv1.DescriptorStatus {
	s.Delay = durationpb.New(d)
	return s
}

// The ranking is the engine's (engine.Response.MostRestrictive): over
// capacity, then over limit, then OK; the longer retry among denials, the
// fewer remaining otherwise; the first of equals.
func TestMostRestrictive(t *testing.T) {
	unlimited := &ratelimitv1.DescriptorStatus{Code: ok, Matched: true, Remaining: 1<<32 - 1, Rule: &ratelimitv1.Rule{Name: "u", Unlimited: true}}
	unmatched := &ratelimitv1.DescriptorStatus{Code: ok}
	replaced := &ratelimitv1.DescriptorStatus{Code: ok, Matched: true} // every limit replaced: no rule
	tests := []struct {
		name string
		sts  []*ratelimitv1.DescriptorStatus
		want int
	}{
		{"no statuses", nil, -1},
		{"fewest remaining", []*ratelimitv1.DescriptorStatus{st("a", ok, 10, 0), st("b", ok, 3, 0)}, 1},
		{"remaining tie: the first", []*ratelimitv1.DescriptorStatus{st("a", ok, 3, 0), st("b", ok, 3, 0)}, 0},
		{"a denial beats fewer remaining", []*ratelimitv1.DescriptorStatus{st("a", ok, 0, 0), st("b", over, 5, time.Second)}, 1},
		{"the longest retry", []*ratelimitv1.DescriptorStatus{st("a", over, 0, time.Second), st("b", over, 0, 2*time.Second)}, 1},
		{"retry tie: the first, whatever remains", []*ratelimitv1.DescriptorStatus{st("a", over, 5, time.Second), st("b", over, 0, time.Second)}, 0},
		{"over capacity beats a longer denial", []*ratelimitv1.DescriptorStatus{st("a", over, 0, time.Hour), st("b", overCapy, 9, 0)}, 1},
		{"two over capacity: fewer remaining", []*ratelimitv1.DescriptorStatus{st("a", overCapy, 5, 0), st("b", overCapy, 2, 0)}, 1},
		{"two over capacity, equal: the first", []*ratelimitv1.DescriptorStatus{st("a", overCapy, 2, 0), st("b", overCapy, 2, 0)}, 0},
		{"shadow never counts", []*ratelimitv1.DescriptorStatus{shadowed(st("s", overCapy, 0, 0)), st("b", ok, 7, 0)}, 1},
		{"unlimited, unmatched, replaced never count", []*ratelimitv1.DescriptorStatus{unlimited, unmatched, replaced, st("d", ok, 9, 0)}, 3},
		{"none counts", []*ratelimitv1.DescriptorStatus{unmatched, shadowed(st("s", over, 0, time.Second))}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decision{Source: SourceService, Response: &ratelimitv1.ShouldRateLimitResponse{Statuses: tt.sts}}
			if got := d.MostRestrictive(); got != tt.want {
				t.Errorf("MostRestrictive() = %d, want %d", got, tt.want)
			}
		})
	}
	if got := (Decision{Source: SourceLocal}).MostRestrictive(); got != -1 {
		t.Errorf("without a Response: %d, want -1", got)
	}
}

// decide reads the service's answer as the user sees it: the policy named
// is that of the most restrictive status, and shadow rules never delay.
func TestDecide(t *testing.T) {
	second := NewDescriptor("path", "/b")
	ds := []Descriptor{NewDescriptor("path", "/a"), second, NewDescriptor("path", "/c")}
	tests := []struct {
		name      string
		code      ratelimitv1.Code
		retry     time.Duration // the response's
		sts       []*ratelimitv1.DescriptorStatus
		want      Decision // Source and Response are not compared
		wantWords string
	}{
		{
			name: "allowed: the longest queue delay",
			code: ok,
			sts:  []*ratelimitv1.DescriptorStatus{delayed(st("a", ok, 1, 0), 100*time.Millisecond), delayed(st("b", ok, 1, 0), 300*time.Millisecond)},
			want: Decision{Allowed: true, Delay: 300 * time.Millisecond}, wantWords: "allowed after a queue delay of 300 ms",
		},
		{
			name: "a shadow rule's delay is not waited",
			code: ok,
			sts:  []*ratelimitv1.DescriptorStatus{delayed(st("a", ok, 1, 0), 100*time.Millisecond), delayed(shadowed(st("s", ok, 1, 0)), 5*time.Second)},
			want: Decision{Allowed: true, Delay: 100 * time.Millisecond}, wantWords: "allowed after a queue delay of 100 ms",
		},
		{
			name: "only a shadow rule delays: no delay",
			code: ok,
			sts:  []*ratelimitv1.DescriptorStatus{delayed(shadowed(st("s", ok, 1, 0)), 5*time.Second)},
			want: Decision{Allowed: true}, wantWords: "allowed",
		},
		{
			name:  "the longest retry names the policy",
			code:  over,
			retry: 2 * time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{st("a", over, 0, time.Second), st("b", over, 0, 2*time.Second)},
			want:  Decision{RetryAfter: 2 * time.Second, Policy: "b"}, wantWords: "throttled by policy 'b'; retry after 2 s",
		},
		{
			name:  "equal retries: the first",
			code:  over,
			retry: time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{st("a", ok, 0, 0), st("b", over, 3, time.Second), st("c", over, 0, time.Second)},
			want:  Decision{RetryAfter: time.Second, Policy: "b"}, wantWords: "throttled by policy 'b'; retry after 1 s",
		},
		{
			name: "over capacity twice: the fewer remaining",
			code: over,
			sts:  []*ratelimitv1.DescriptorStatus{st("a", overCapy, 5, 0), st("b", overCapy, 2, 0)},
			want: Decision{Never: true, Policy: "b"}, wantWords: "throttled by policy 'b'; the request costs more than the limit's capacity, so no wait will admit it",
		},
		{
			name: "over capacity twice, equal remaining: the first",
			code: over,
			sts:  []*ratelimitv1.DescriptorStatus{st("a", over, 0, time.Hour), st("b", overCapy, 2, 0), st("c", overCapy, 2, 0)},
			want: Decision{Never: true, Policy: "b"}, wantWords: "throttled by policy 'b'; the request costs more than the limit's capacity, so no wait will admit it",
		},
		{
			name:  "a shadow rule over capacity neither names the policy nor makes it Never",
			code:  over,
			retry: time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{shadowed(st("s", overCapy, 0, 0)), st("b", over, 0, time.Second)},
			want:  Decision{RetryAfter: time.Second, Policy: "b"}, wantWords: "throttled by policy 'b'; retry after 1 s",
		},
		{
			name:  "a rule without a name: the descriptor",
			code:  over,
			retry: time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{st("a", ok, 0, 0), st("", over, 0, time.Second)},
			want:  Decision{RetryAfter: time.Second, Policy: second.String()}, wantWords: "throttled by policy 'path=/b'; retry after 1 s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &ratelimitv1.ShouldRateLimitResponse{OverallCode: tt.code, Statuses: tt.sts}
			if tt.retry > 0 {
				resp.RetryAfter = durationpb.New(tt.retry)
			}
			got := decide(resp, ds)
			if got.Allowed != tt.want.Allowed || got.Delay != tt.want.Delay || got.RetryAfter != tt.want.RetryAfter ||
				got.Never != tt.want.Never || got.Policy != tt.want.Policy {
				t.Errorf("decide: Allowed %v Delay %v RetryAfter %v Never %v Policy %q\nwant    Allowed %v Delay %v RetryAfter %v Never %v Policy %q",
					got.Allowed, got.Delay, got.RetryAfter, got.Never, got.Policy,
					tt.want.Allowed, tt.want.Delay, tt.want.RetryAfter, tt.want.Never, tt.want.Policy)
			}
			if s := got.String(); s != tt.wantWords {
				t.Errorf("String() = %q\nwant        %q", s, tt.wantWords)
			}
		})
	}
}
