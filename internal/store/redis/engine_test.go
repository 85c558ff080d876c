package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// TestEngineOnRedis: what a user sees of a changed limit and of one bucket
// named twice is what the memory store gives (internal/engine's tests),
// on Redis: the 22 of 10 an hour used leave 18 of 40 after a reload, and
// two descriptors of one bucket are decided on the running total.
func TestEngineOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	policy := func(requests string) *config.Policy {
		p, err := config.Parse("p.yaml", []byte(`
domain: d
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: `+requests+`}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := clock.NewFake(int64(1_767_225_600) * int64(time.Second))
	e := engine.New(policy("10"), newTestStore(t, redis.Config{Addr: srv.Addr()}, c))
	ask := func(key string, op engine.Op, costs ...uint64) *engine.Response {
		t.Helper()
		req := &engine.Request{Domain: "d"}
		for i := range costs {
			req.Descriptors = append(req.Descriptors, engine.Descriptor{Entries: []config.Entry{{Key: key, Value: "v"}}, Op: op, Hits: &costs[i]})
		}
		var resp engine.Response
		if err := e.ShouldRateLimit(context.Background(), req, &resp); err != nil {
			t.Fatal(err)
		}
		return &resp
	}

	var resp engine.Response
	overdrawn := uint64(22) // of 10: 12 in debt
	if err := e.ShouldRateLimit(context.Background(), &engine.Request{Domain: "d", Descriptors: []engine.Descriptor{{
		Entries: []config.Entry{{Key: "tenant", Value: "v"}}, Overdraft: engine.OverdraftAlways, Hits: &overdrawn}}}, &resp); err != nil {
		t.Fatal(err)
	}
	e.SetPolicy(policy("40"))
	if r := ask("tenant", engine.OpCharge, 0); r.Statuses[0].Remaining != 18 {
		t.Errorf("after the reload: %+v, want 18 of 40 left", r.Statuses[0])
	}
	if r := ask("tenant", engine.OpCharge, 19); r.Code == 0 || r.Statuses[0].RetryAfter != 6*time.Minute {
		t.Errorf("19 of the 18 left: %+v, want denied until one more refills at the old rate (6m)", r.Statuses[0])
	}
	if r := ask("tenant", engine.OpCharge, 18); r.Code != 0 || r.Statuses[0].ResetAfter != time.Hour {
		t.Errorf("18 of the 18 left: %+v, want admitted, full for an hour at the new rate", r.Statuses[0])
	}

	ask("user", engine.OpCharge, 6)
	r := ask("user", engine.OpCharge, 3, 4)
	if r.Code == 0 || r.Statuses[0].Code != 0 || r.Statuses[0].Remaining != 4 || r.Statuses[1].Code == 0 {
		t.Errorf("6 used, then 3 and 4 of 10: %+v, want the first within the limit (4 left, uncharged), the second over", r)
	}
	if r := ask("user", engine.OpCharge, 1, 3); r.Code != 0 || r.Statuses[0].Remaining != 3 || r.Statuses[1].Remaining != 0 {
		t.Errorf("6 used, then 1 and 3 of 10: %+v, want 3 and then 0 left", r)
	}
}
