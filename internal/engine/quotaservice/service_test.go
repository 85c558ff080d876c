package quotaservice

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

const policy = `
domain: d
descriptors:
  - key: plan
    value: gold
    rate_limits:
      - {unit: minute, requests_per_unit: 600}
      - {unit: second, requests_per_unit: 5}
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: plan
    value: open
    rate_limit: {unlimited: true}
  - key: path
    value: /uploads/*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: route
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 60}
`

func newService(t testing.TB) *Service {
	t.Helper()
	p, err := config.Parse("d.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return New(func() *config.Policy { return p }, clock.NewFake(0))
}

// usage is a usage of the bucket of the given key/value pairs.
func usage(asked uint64, kv ...string) Usage {
	u := Usage{Bucket: map[string]string{}, Asked: asked, Elapsed: time.Second}
	for i := 0; i < len(kv); i += 2 {
		u.Bucket[kv[i]] = kv[i+1]
		u.Entries = append(u.Entries, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return u
}

// TestAnswers: what each kind of rule answers, the limit of the lowest
// rate of several divided.
func TestAnswers(t *testing.T) {
	s := newService(t)
	c := s.Open("", "d", "")
	for _, tc := range []struct {
		bucket []string
		kind   Kind
		share  int64
		period time.Duration
	}{
		{[]string{"plan", "gold"}, Share, 5, time.Second}, // 5/s is less than 600/min
		{[]string{"plan", "free"}, DenyAll, 0, 0},
		{[]string{"plan", "open"}, AllowAll, 0, 0},
		{[]string{"plan", "unknown"}, AllowAll, 0, 0},
	} {
		if err := c.Report(context.Background(), []Usage{usage(1000, tc.bucket...)}); err != nil {
			t.Fatal(err)
		}
		got := c.Take()
		if len(got) != 1 {
			t.Fatalf("%v: %d actions, want 1", tc.bucket, len(got))
		}
		a := got[0]
		if a.Kind != tc.kind || a.Assignment.Share != tc.share || a.Assignment.Period != tc.period ||
			a.Assignment.TTL != 2*time.Second || !reflect.DeepEqual(a.Bucket, usage(0, tc.bucket...).Bucket) {
			t.Errorf("%v: %v %+v for %v, want %v of %d per %v, ttl 2s", tc.bucket, a.Kind, a.Assignment, a.Bucket, tc.kind, tc.share, tc.period)
		}
	}
}

// TestBucketKeys: a bucket of shares is named by engine.BucketKey — the
// domain, the entries (a share_threshold value as its pattern), shared or
// not, the limit's whole Key — and ParseBucketKey reads every such name
// back; values a share_threshold wildcard matches share one bucket.
func TestBucketKeys(t *testing.T) {
	s := newService(t)
	c := s.Open("", "d", "")
	dom := s.policy().Domain("d")
	entries := func(kv ...string) []config.Entry { return usage(0, kv...).Entries }
	want := map[string]engine.BucketKey{}
	for _, kv := range [][]string{
		{"plan", "gold"},
		{"path", "/uploads/a.png", "user", "alice"},
		{"path", "/uploads/b.png", "user", "alice"}, // the same bucket
		{"route", "/api/orders"},
	} {
		if err := c.Report(context.Background(), []Usage{usage(1, kv...)}); err != nil {
			t.Fatal(err)
		}
		rule := dom.Match(entries(kv...))
		k := engine.BucketKey{Domain: "d", Entries: entries(kv...), Shared: rule.Shared != nil, Limit: rule.Limits[len(rule.Limits)-1].Key}
		for i, p := range rule.Shared {
			if p != "" {
				k.Entries[i].Value = p
			}
		}
		want[string(k.Append(nil))] = k
	}
	views := s.View()
	if len(views) != len(want) || len(want) != 3 {
		t.Fatalf("%d buckets of shares, want %d (of 3)", len(views), len(want))
	}
	for _, v := range views {
		got, ok := engine.ParseBucketKey([]byte(v.BucketView.Bucket))
		if w, in := want[v.BucketView.Bucket]; !ok || !in || !reflect.DeepEqual(got, w) {
			t.Errorf("bucket %q parses as %+v, %v; want one of %v", v.BucketView.Bucket, got, ok, want)
		}
	}
}

// TestBacklogBounded: a client whose answers are not taken has at most
// MaxPending of them waiting; its next usage waits, and gives up, applying
// nothing, when its context ends; once they are taken it is applied.
func TestBacklogBounded(t *testing.T) {
	s := newService(t)
	c := s.Open("", "d", "")
	usages := make([]Usage, MaxPending+1)
	for i := range usages {
		usages[i] = usage(1, "nomatch", strconv.Itoa(i))
	}
	if err := c.Report(context.Background(), usages[:MaxPending]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Report(ctx, usages[MaxPending:]); !errors.Is(err, context.Canceled) {
		t.Fatalf("a usage past %d untaken answers: %v, want it to wait until its context ends", MaxPending, err)
	}
	if got := len(c.Take()); got != MaxPending {
		t.Fatalf("took %d answers, want %d", got, MaxPending)
	}
	if err := c.Report(ctx, usages[MaxPending:]); err != nil {
		t.Fatalf("a usage once the answers were taken: %v", err)
	}
	if got := c.Take(); len(got) != 1 || got[0].Bucket["nomatch"] != strconv.Itoa(MaxPending) {
		t.Fatalf("took %+v, want the last usage's answer", got)
	}
}

// TestQueueReplaces: an answer for a bucket replaces the one pending for
// it (the same bucket, whatever its map's order), in its place, and Take
// returns each bucket's last, once.
func TestQueueReplaces(t *testing.T) {
	s := newService(t)
	c := s.Open("", "d", "")
	for _, kv := range [][]string{{"plan", "open", "user", "u0"}, {"plan", "open", "user", "u1"}, {"plan", "open", "user", "u2"}} {
		if err := c.Report(context.Background(), []Usage{usage(1, kv...)}); err != nil {
			t.Fatal(err)
		}
	}
	c.queue(Action{Bucket: map[string]string{"user": "u1", "plan": "open"}, Kind: DenyAll,
		id: string(engine.AppendBucketKey(nil, "d", usage(0, "plan", "open", "user", "u1").Entries, nil, ""))})
	got := c.Take()
	if len(got) != 3 {
		t.Fatalf("took %d actions, want 3", len(got))
	}
	for i, a := range got {
		want := map[bool]Kind{true: DenyAll, false: AllowAll}[i == 1]
		if a.Kind != want || a.Bucket["user"] != "u"+strconv.Itoa(i) {
			t.Errorf("action %d: %v for %v, want %v for u%d", i, a.Kind, a.Bucket, want, i)
		}
	}
	if got := c.Take(); len(got) != 0 {
		t.Fatalf("took %d more", len(got))
	}
}

// BenchmarkQueue is a report's k answers queued for a client that is not
// taking them, over k answers already pending for the same buckets (its
// previous report's): each replaces one.
func BenchmarkQueue(b *testing.B) {
	for _, k := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			c := newService(b).Open("", "d", "")
			as := make([]Action, k)
			for i := range as {
				u := usage(1, "name", "api", "user", "u"+strconv.Itoa(i))
				as[i] = Action{Bucket: u.Bucket, Kind: AllowAll, id: string(engine.AppendBucketKey(nil, "d", u.Entries, nil, ""))}
				c.queue(as[i])
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, a := range as {
					c.queue(a)
				}
			}
		})
	}
}
