package console_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// budgetPolicy: token budgets of 1000 an hour that take overdraft, one a
// token bucket, one a fixed window.
const budgetPolicy = `
domain: ai
descriptors:
  - key: tenant
    rate_limit: {name: tokens, algorithm: token_bucket, unit: hour, requests_per_unit: 1000, overdraft: true}
  - key: team
    rate_limit: {name: team_tokens, unit: hour, requests_per_unit: 1000, overdraft: true}
  - key: unsaid
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: fast
    rate_limit: {name: fast, algorithm: token_bucket, unit: second, requests_per_unit: 3, overdraft: true}
  - key: slide
    rate_limit: {name: slide, algorithm: sliding_window, unit: hour, requests_per_unit: 1000, overdraft: true}
`

// TestInspectShowsDebt: a bucket an overdraft charge took into debt shows
// 0 remaining and what it owes, exactly, whatever its algorithm.
func TestInspectShowsDebt(t *testing.T) {
	d := daemontest.Start(t, budgetPolicy)
	c := rl.NewRateLimitServiceClient(d.Dial(t))
	for key, hits := range map[string]uint32{"tenant": 1250, "team": 1250, "slide": 1250, "fast": 4} {
		r := desc(key, "acme")
		r.Hits = proto.Uint32(hits)
		resp, err := c.ShouldRateLimit(context.Background(), &rl.ShouldRateLimitRequest{Domain: "ai", Descriptors: []*rl.Descriptor{r}})
		if err != nil || resp.OverallCode != rl.Code_CODE_OVER_LIMIT {
			t.Fatalf("%s: %d tokens: %v %v, want OVER_LIMIT (charged, in debt)", key, hits, resp, err)
		}
	}
	type bucket struct {
		Remaining  int64
		ResetAfter string `json:"reset_after"`
		Debt       int64
	}
	for key, want := range map[string]bucket{
		"tenant": {0, "1h15m0s", 250}, // 1250 tokens at 1000 an hour
		"team":   {0, "46m0s", 250},   // until the window's end (daemontest.T0 is 14m into an hour)
		"slide":  {0, "1h46m0s", 250}, // weighed out over the next window
		// 4 at 3 a second: a backlog of 4/3 s, 1/3 s beyond the capacity's
		// 1s, is 1 unit owed (ResetAfter rounded up to 1333333334ns reads
		// as 4.000000002 units: an estimate from it would say 2).
		"fast": {0, "1.333333334s", 1},
	} {
		var body struct{ Buckets []bucket }
		getJSON(t, d, "/console/api/inspect?domain=ai&entry="+url.QueryEscape(key+"=acme"), &body)
		if len(body.Buckets) != 1 || fmt.Sprint(body.Buckets[0]) != fmt.Sprint(want) {
			t.Errorf("%s: %+v, want %+v", key, body.Buckets, want)
		}
	}
}

// TestSimulateBudgetInDebt: the simulator shows a budget charged after the
// fact going into debt, for algorithms given by hand and for a rule whose
// limit says overdraft: true.
func TestSimulateBudgetInDebt(t *testing.T) {
	d := daemontest.Start(t, budgetPolicy)
	var body struct {
		Lanes []struct {
			Lane             string
			Admitted, Denied int
		}
		SVG string
	}
	simulateJSON(t, d, "alg=fixed_window&requests=1000&period=1m&overdraft=true&pattern=steady&rate=1&cost=300&duration=1m", &body)
	if len(body.Lanes) != 1 || body.Lanes[0].Admitted != 4 || !strings.Contains(body.SVG, `class="debt"`) {
		t.Errorf("1000 a minute, 300 a second, overdraft: %+v; want 4 admitted and the debt drawn", body.Lanes)
	}
	simulateJSON(t, d, "domain=ai&stat_key=ai.team&pattern=steady&rate=0.01&cost=300&duration=1h", &body)
	if len(body.Lanes) != 1 || body.Lanes[0].Admitted != 4 || !strings.Contains(body.SVG, `class="debt"`) {
		t.Errorf("rule team (overdraft: true), 300 every 100s: %+v; want 4 admitted and the debt drawn", body.Lanes)
	}
}

// TestSimulateOverdraftByDefault: a rule that does not say overdraft: is
// simulated as the daemon decides it, with --overdraft-by-default or
// without.
func TestSimulateOverdraftByDefault(t *testing.T) {
	for _, byDefault := range []bool{false, true} {
		d := daemontest.Start(t, budgetPolicy, func(c *daemon.Config) { c.OverdraftByDefault = byDefault })
		var body struct {
			Lanes []struct{ Admitted int }
			SVG   string
		}
		simulateJSON(t, d, "domain=ai&stat_key=ai.unsaid&pattern=steady&rate=0.01&cost=300&duration=1h", &body)
		want, debt := 3, false // 300 every 100s: three fit in 1000
		if byDefault {
			want, debt = 4, true // the fourth is checked with 100 left, and takes the budget into debt
		}
		if len(body.Lanes) != 1 || body.Lanes[0].Admitted != want || strings.Contains(body.SVG, `class="debt"`) != debt {
			t.Errorf("overdraft by default %v: %+v; want %d admitted, debt drawn %v", byDefault, body.Lanes, want, debt)
		}
	}
}

// TestInspectConcurrency: a concurrency's bucket shows its free places and
// the time its last unit expires by its lease; it owes nothing (a lease
// that runs past lease is not debt).
func TestInspectConcurrency(t *testing.T) {
	d := daemontest.Start(t, `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {algorithm: concurrency, max_in_flight: 2, lease: 10m}
`)
	c := rl.NewRateLimitServiceClient(d.Dial(t))
	if resp, err := c.ShouldRateLimit(context.Background(), &rl.ShouldRateLimitRequest{Domain: "llm", Descriptors: []*rl.Descriptor{desc("tenant", "acme")}}); err != nil || resp.OverallCode != rl.Code_CODE_OK {
		t.Fatalf("a charge: %v %v", resp, err)
	}
	var body struct {
		Buckets []struct {
			Remaining  int64
			ResetAfter string `json:"reset_after"`
			Debt       int64
		}
	}
	getJSON(t, d, "/console/api/inspect?domain=llm&entry="+url.QueryEscape("tenant=acme"), &body)
	// daemontest.T0 is 40s into a slot of 100s (10m/6): the unit expires
	// 10m after the slot's last nanosecond.
	if len(body.Buckets) != 1 || body.Buckets[0].Remaining != 1 || body.Buckets[0].Debt != 0 || body.Buckets[0].ResetAfter != "10m59.999999999s" {
		t.Errorf("%+v, want 1 remaining, no debt, reset after 10m59.999999999s", body.Buckets)
	}
}
