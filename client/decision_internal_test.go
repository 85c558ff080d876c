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

func overdrew(s *ratelimitv1.DescriptorStatus) *ratelimitv1.DescriptorStatus {
	s.Overdrew = true
	return s
}

func owing(s *ratelimitv1.DescriptorStatus, debt uint64) *ratelimitv1.DescriptorStatus {
	s.Debt = debt
	return s
}

func delayed(s *ratelimitv1.DescriptorStatus, d time.Duration) *ratelimitv1.DescriptorStatus {
	s.Delay = durationpb.New(d)
	return s
}

// MostRestrictive is the status the service names (most_restrictive, 1 +
// its index), never one the client ranks itself; the service's ranking is
// engine.Response.MostRestrictive's, tested there.
func TestMostRestrictive(t *testing.T) {
	two := []*ratelimitv1.DescriptorStatus{st("a", ok, 0, 0), st("b", ok, 9, 0)}
	tests := []struct {
		name string
		sts  []*ratelimitv1.DescriptorStatus
		most uint32
		want int
	}{
		{"none named", two, 0, -1},
		{"the first", two, 1, 0},
		{"the second, though it has more remaining", two, 2, 1},
		{"past the statuses", two, 3, -1},
		{"no statuses", nil, 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decision{Source: SourceService, Response: &ratelimitv1.ShouldRateLimitResponse{Statuses: tt.sts, MostRestrictive: tt.most}}
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
		most      uint32   // the response's most_restrictive
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
			most:  2,
			retry: 2 * time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{st("a", over, 0, time.Second), st("b", over, 0, 2*time.Second)},
			want:  Decision{RetryAfter: 2 * time.Second, Policy: "b"}, wantWords: "throttled by policy 'b'; retry after 2 s",
		},
		{
			name:  "equal retries: the first",
			code:  over,
			most:  2,
			retry: time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{st("a", ok, 0, 0), st("b", over, 3, time.Second), st("c", over, 0, time.Second)},
			want:  Decision{RetryAfter: time.Second, Policy: "b"}, wantWords: "throttled by policy 'b'; retry after 1 s",
		},
		{
			name: "over capacity twice: the fewer remaining",
			code: over,
			most: 2,
			sts:  []*ratelimitv1.DescriptorStatus{st("a", overCapy, 5, 0), st("b", overCapy, 2, 0)},
			want: Decision{Never: true, Policy: "b"}, wantWords: "throttled by policy 'b'; the request costs more than the limit's capacity, so no wait will admit it",
		},
		{
			name: "over capacity twice, equal remaining: the first",
			code: over,
			most: 2,
			sts:  []*ratelimitv1.DescriptorStatus{st("a", over, 0, time.Hour), st("b", overCapy, 2, 0), st("c", overCapy, 2, 0)},
			want: Decision{Never: true, Policy: "b"}, wantWords: "throttled by policy 'b'; the request costs more than the limit's capacity, so no wait will admit it",
		},
		{
			name:  "a shadow rule over capacity neither names the policy nor makes it Never",
			code:  over,
			most:  2,
			retry: time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{shadowed(st("s", overCapy, 0, 0)), st("b", over, 0, time.Second)},
			want:  Decision{RetryAfter: time.Second, Policy: "b"}, wantWords: "throttled by policy 'b'; retry after 1 s",
		},
		{
			name:  "the status the service names, whatever the client would rank",
			code:  over,
			most:  1,
			retry: 2 * time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{st("a", over, 0, time.Second), st("b", over, 0, 2*time.Second)},
			want:  Decision{RetryAfter: 2 * time.Second, Policy: "a"}, wantWords: "throttled by policy 'a'; retry after 2 s",
		},
		{
			name:  "a charge that overdrew",
			code:  over,
			most:  1,
			retry: time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{overdrew(st("tokens", over, 0, time.Second))},
			want:  Decision{RetryAfter: time.Second, Policy: "tokens", Overdrew: true}, wantWords: "throttled by policy 'tokens'; retry after 1 s",
		},
		{
			name:  "the most owed, a shadow rule's left out",
			code:  over,
			most:  2,
			retry: time.Second,
			sts: []*ratelimitv1.DescriptorStatus{shadowed(owing(st("s", over, 0, time.Second), 90)), owing(st("a", over, 0, time.Second), 7),
				owing(st("b", ok, 0, 0), 3)},
			want: Decision{RetryAfter: time.Second, Policy: "a", Debt: 7}, wantWords: "throttled by policy 'a'; retry after 1 s",
		},
		{
			name:  "a rule without a name: the descriptor",
			code:  over,
			most:  2,
			retry: time.Second,
			sts:   []*ratelimitv1.DescriptorStatus{st("a", ok, 0, 0), st("", over, 0, time.Second)},
			want:  Decision{RetryAfter: time.Second, Policy: second.String()}, wantWords: "throttled by policy 'path=/b'; retry after 1 s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &ratelimitv1.ShouldRateLimitResponse{OverallCode: tt.code, Statuses: tt.sts, MostRestrictive: tt.most}
			if tt.retry > 0 {
				resp.RetryAfter = durationpb.New(tt.retry)
			}
			got := decide(resp, ds)
			if got.Allowed != tt.want.Allowed || got.Delay != tt.want.Delay || got.RetryAfter != tt.want.RetryAfter ||
				got.Never != tt.want.Never || got.Policy != tt.want.Policy || got.Overdrew != tt.want.Overdrew || got.Debt != tt.want.Debt {
				t.Errorf("decide: Allowed %v Delay %v RetryAfter %v Never %v Policy %q Overdrew %v Debt %d\nwant    Allowed %v Delay %v RetryAfter %v Never %v Policy %q Overdrew %v Debt %d",
					got.Allowed, got.Delay, got.RetryAfter, got.Never, got.Policy, got.Overdrew, got.Debt,
					tt.want.Allowed, tt.want.Delay, tt.want.RetryAfter, tt.want.Never, tt.want.Policy, tt.want.Overdrew, tt.want.Debt)
			}
			if s := got.String(); s != tt.wantWords {
				t.Errorf("String() = %q\nwant        %q", s, tt.wantWords)
			}
		})
	}
}
