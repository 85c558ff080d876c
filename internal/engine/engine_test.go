package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

const t0 = int64(1_700_000_040) * int64(time.Second)

func newEngine(t *testing.T, policy string, opts ...Option) *Engine {
	t.Helper()
	p, err := config.Parse("test.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return New(p, memory.New(clock.NewFake(t0)), opts...)
}

func decide(t *testing.T, e *Engine, req *Request) *Response {
	t.Helper()
	var resp Response
	if err := e.ShouldRateLimit(context.Background(), req, &resp); err != nil {
		t.Fatal(err)
	}
	return &resp
}

func entries(kv ...string) []config.Entry {
	var es []config.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestRetryJitterIsAddedWithinItsBound(t *testing.T) {
	const policy = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, retry_jitter: 250ms}
`
	var asked []time.Duration
	e := newEngine(t, policy, WithJitter(func(max time.Duration) time.Duration {
		asked = append(asked, max)
		return max / 5
	}))
	req := &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k", "v")}}}
	if r := decide(t, e, req); r.Code != algorithms.Allowed {
		t.Fatalf("first call: %+v", r)
	}
	r := decide(t, e, req)
	if r.Code != algorithms.Denied || r.RetryAfter != time.Second+50*time.Millisecond {
		t.Fatalf("want denied with retry 1s + 50ms of jitter, got %v %v", r.Code, r.RetryAfter)
	}
	if len(asked) != 1 || asked[0] != 250*time.Millisecond {
		t.Fatalf("jitter asked for %v, want once with the rule's 250ms", asked)
	}

	// The default source stays within [0, jitter].
	e = newEngine(t, policy)
	decide(t, e, req)
	for range 100 {
		r := decide(t, e, req)
		if r.RetryAfter < time.Second || r.RetryAfter > time.Second+250*time.Millisecond {
			t.Fatalf("retry_after %v outside [1s, 1.25s]", r.RetryAfter)
		}
	}
}

// TestShadowQueueDoesNotDelay: a leaky_bucket_queue rule delays admitted
// requests, unless it is in shadow mode (per rule or globally), where it
// only observes.
func TestShadowQueueDoesNotDelay(t *testing.T) {
	policy := func(shadow bool) string {
		return fmt.Sprintf(`
domain: d
descriptors:
  - key: q
    shadow_mode: %v
    rate_limit: {algorithm: leaky_bucket_queue, unit: second, requests_per_unit: 10, burst: 5}
`, shadow)
	}
	tests := []struct {
		name      string
		shadow    bool
		opts      []Option
		wantDelay time.Duration
	}{
		{"enforced", false, nil, 100 * time.Millisecond},
		{"shadow rule", true, nil, 0},
		{"global shadow mode", false, []Option{WithShadowMode(true)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, policy(tt.shadow), tt.opts...)
			req := &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("q", "x")}}}
			decide(t, e, req)
			if r := decide(t, e, req); r.Statuses[0].Delay != tt.wantDelay || r.Code != algorithms.Allowed {
				t.Fatalf("second request: %v with delay %v, want allowed with delay %v", r.Code, r.Statuses[0].Delay, tt.wantDelay)
			}
		})
	}
}

// recorder is a store that admits everything and keeps what it was asked.
type recorder struct{ charges []store.Charge }

func (r *recorder) Apply(_ context.Context, charges []store.Charge, _ []algorithms.Decision) error {
	for _, c := range charges {
		c.Key = append([]byte(nil), c.Key...)
		r.charges = append(r.charges, c)
	}
	return nil
}

// TestChargesNameTheirDomain: every charge carries the request's domain,
// which a distributed store uses to keep a request's buckets together,
// and distinct domains never share a bucket key.
func TestChargesNameTheirDomain(t *testing.T) {
	keys := map[string]string{} // bucket key -> domain
	for _, domain := range []string{"default", "a}b", "{x}", "ünïcödé"} {
		rec := &recorder{}
		e := New(config.Default(), rec)
		req := &Request{Domain: domain, Descriptors: []Descriptor{
			{Entries: entries("generic_key", "global")},
			{Entries: entries("path", "/orders"), Limit: &InlineLimit{Algorithm: algorithms.TokenBucket, Requests: 5, Period: time.Second}},
		}}
		decide(t, e, req)
		if len(rec.charges) == 0 {
			t.Fatalf("domain %q: nothing charged", domain)
		}
		for _, c := range rec.charges {
			if c.Domain != domain {
				t.Errorf("a charge of a request in %q names domain %q", domain, c.Domain)
			}
			if other, ok := keys[string(c.Key)]; ok && other != domain {
				t.Errorf("domains %q and %q share bucket key %q", other, domain, c.Key)
			}
			keys[string(c.Key)] = domain
		}
	}
}
