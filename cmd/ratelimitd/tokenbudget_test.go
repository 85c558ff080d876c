package main

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	rlclient "github.com/ratelimitd/ratelimitd/client"
	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// budget is the token budget of the end-to-end tests: 1000 tokens, given
// back at one an hour, so that no token comes back while a test runs and
// every count below is exact on the real clock the built daemon (and
// Redis) decides on.
const (
	budget      = 1000
	tokenPeriod = time.Hour
)

// budgetPolicy is the policy: the budget, taking overdraft when
// overdraft is "true", leaving it to --overdraft-by-default when "".
func budgetPolicy(overdraft string) string {
	p := "domain: ai\ndescriptors:\n  - key: tenant\n    rate_limit: {name: tokens, algorithm: token_bucket, unit: hour, requests_per_unit: 1, burst: " + strconv.Itoa(budget)
	if overdraft != "" {
		p += ", overdraft: " + overdraft
	}
	return p + "}\n"
}

// envoyClient dials p's Envoy v3 service, as Envoy does.
func envoyClient(t *testing.T, p *process) rlsv3.RateLimitServiceClient {
	return rlsv3.NewRateLimitServiceClient(dial(t, p))
}

// startBudget runs the built daemon on budgetPolicy(overdraft), on Redis
// when useRedis, with args added.
func startBudget(t *testing.T, overdraft string, useRedis bool, args ...string) *process {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "ai.yaml")
	if err := os.WriteFile(policy, []byte(budgetPolicy(overdraft)), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--config", policy}, args...)
	if useRedis {
		args = append(args, "--store", "redis", "--redis-addr", redistest.Start(t).Addr())
	}
	return startProcess(t, args...)
}

// tokens is one call on the tenant's budget: a check (hits_addend 0, as
// Envoy Gateway sends on the request path), a stream-done charge of n, or
// a refund of n (is_negative_hits).
func tokens(t testing.TB, c rlsv3.RateLimitServiceClient, n uint64, refund bool) *rlsv3.RateLimitResponse {
	d := &rlcommonv3.RateLimitDescriptor{
		Entries:        []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}},
		HitsAddend:     wrapperspb.UInt64(n),
		IsNegativeHits: refund,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Errorf("ShouldRateLimit: %v", err)
		return nil
	}
	return r
}

func retryAfter(r *rlsv3.RateLimitResponse) (time.Duration, bool) {
	for _, h := range r.GetResponseHeadersToAdd() {
		if h.GetKey() == "Retry-After" {
			s, err := strconv.Atoi(h.GetValue())
			return time.Duration(s) * time.Second, err == nil
		}
	}
	return 0, false
}

// TestEnvoyGatewayTokenBudget runs Envoy Gateway's token-limit flow
// (cost.request: a check at hits_addend 0; cost.response: the tokens used,
// charged when the stream ends) against the built daemon, on the memory
// store and on Redis, with the overdraft said in the policy or by
// --overdraft-by-default:
//
//   - concurrent streams, each admitted by a check and then charged a
//     random number of tokens, some more than the whole budget: a check is
//     admitted only while less than the budget is charged (the total
//     charged never exceeds the budget plus what streams already admitted
//     charge), and denied once the charges that may have landed reach it;
//   - every charge lands in full: the debt is exactly what was charged
//     past the budget, checks are denied with the wait for the debt and
//     one token to come back, and refunds restore exactly what they say,
//     never past a full budget.
func TestEnvoyGatewayTokenBudget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, overdraft string
		redis           bool
		args            []string
	}{
		{"memory", "true", false, nil},
		{"memory, overdraft by default", "", false, []string{"--overdraft-by-default"}},
		{"redis", "true", true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startBudget(t, tt.overdraft, tt.redis, append([]string{"--response-headers=legacy"}, tt.args...)...)
			tokenBudgetFlow(t, envoyClient(t, p))
		})
	}
}

func tokenBudgetFlow(t *testing.T, c rlsv3.RateLimitServiceClient) {
	start := time.Now()
	var (
		started, completed atomic.Int64 // tokens of charges sent, and answered
		admitted           atomic.Int64 // streams
		wg                 sync.WaitGroup
	)
	const streams = 8
	for w := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 21))
			for {
				before := completed.Load()
				r := tokens(t, c, 0, false)
				if r == nil {
					return
				}
				if r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
					if sent := started.Load(); sent < budget {
						t.Errorf("a check was denied with at most %d tokens charged, less than the budget of %d", sent, budget)
					}
					return
				}
				if before >= budget {
					t.Errorf("a check was admitted with %d tokens already charged, the budget is %d", before, budget)
					return
				}
				admitted.Add(1)
				n := uint64(1 + rng.IntN(120))
				if rng.IntN(25) == 0 {
					n = budget + 500 // more than the whole budget: one answer's tokens
				}
				started.Add(int64(n))
				if r := tokens(t, c, n, false); r == nil {
					return
				}
				completed.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := completed.Load()
	if total < budget {
		t.Fatalf("every stream was denied with %d tokens charged, less than the budget", total)
	}
	debt := total - budget
	t.Logf("%d streams admitted, %d tokens charged: %d in debt", admitted.Load(), total, debt)

	// In debt: a check is denied until the debt and one more token have come
	// back, at one token an hour (Retry-After in whole seconds, rounded up).
	r := tokens(t, c, 0, false)
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a check in debt: %v", r)
	}
	elapsed := time.Since(start)
	wait, ok := retryAfter(r)
	if latest := time.Duration(debt+1) * tokenPeriod; !ok || wait > latest || wait < latest-elapsed-time.Second {
		t.Errorf("Retry-After %v (%v), want within %v of %v: the debt of %d and one token", wait, ok, elapsed, latest, debt)
	}
	// Refunds restore exactly what they say: the debt is paid back and the
	// budget is empty, then one token is back.
	if debt > 0 {
		if r := tokens(t, c, uint64(debt), true); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("a refund of the debt: %v", r)
		}
		if r := tokens(t, c, 0, false); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("a check with the budget exactly spent was admitted: %v", r)
		}
	}
	if r := tokens(t, c, 37, true); r.Statuses[0].LimitRemaining != 37 {
		t.Fatalf("a refund of 37 with the budget spent leaves %d", r.Statuses[0].LimitRemaining)
	}
	if r := tokens(t, c, 0, false); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 37 {
		t.Fatalf("a check with 37 tokens back: %v", r)
	}
	// A stream-done charge of 40 leaves 3 in debt.
	if r := tokens(t, c, 40, false); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a charge of 40 with 37 left: %v", r)
	}
	if r := tokens(t, c, 3, true); r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a refund of the 3 in debt leaves %d", r.Statuses[0].LimitRemaining)
	}
	if r := tokens(t, c, 1, true); r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("a refund of 1 after the debt leaves %d", r.Statuses[0].LimitRemaining)
	}
	// Never past a full budget.
	if r := tokens(t, c, 5*budget, true); r.Statuses[0].LimitRemaining != budget || r.Statuses[0].DurationUntilReset.AsDuration() != 0 {
		t.Fatalf("a refund of more than was charged: %v", r)
	}
}

// TestReserveSettle is a Go program using the client's reservations
// against the built daemon, on the memory store and on Redis: concurrent
// workers reserve an estimate, then settle for what they used, more or
// less. What the budget holds at the end is exactly the budget less what
// the admitted reservations used (no token comes back during the test).
func TestReserveSettle(t *testing.T) {
	t.Parallel()
	for _, useRedis := range []bool{false, true} {
		name := "memory"
		if useRedis {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			p := startBudget(t, "true", useRedis)
			c, err := rlclient.New(p.grpc, rlclient.WithTimeout(10*time.Second), rlclient.WithFailClosed(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tenant := rlclient.NewDescriptor("tenant", "acme")
			var used, admitted, denied atomic.Int64
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 4))
					for range 8 {
						r, err := c.Reserve(context.Background(), 100, "ai", tenant)
						if err != nil || r.Source != rlclient.SourceService {
							t.Errorf("reserve: %v %v", r, err)
							return
						}
						if !r.Allowed {
							denied.Add(1)
							continue
						}
						admitted.Add(1)
						actual := uint32(rng.IntN(260))
						if d, err := r.Settle(context.Background(), actual); err != nil || d.Source != rlclient.SourceService {
							t.Errorf("settle: %v %v", d, err)
							return
						}
						used.Add(int64(actual))
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			u := used.Load()
			t.Logf("%d reservations admitted, %d denied; %d tokens used", admitted.Load(), denied.Load(), u)
			if denied.Load() == 0 {
				t.Fatalf("no reservation was denied: the budget was never used up")
			}
			env := envoyClient(t, p)
			r := tokens(t, env, 0, false)
			if left := int64(r.Statuses[0].LimitRemaining); left != max(0, budget-u) {
				t.Fatalf("%d left after %d used of %d", left, u, budget)
			}
			if u > budget { // exactly u - budget in debt
				tokens(t, env, uint64(u-budget), true)
				if r := tokens(t, env, 0, false); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("the debt of %d was not %d: %v", u-budget, u-budget, r)
				}
				if r := tokens(t, env, 1, true); r.Statuses[0].LimitRemaining != 1 {
					t.Fatalf("after the debt of %d and 1 refunded: %v", u-budget, r)
				}
			}
		})
	}
}

// TestDebtPaidByRefill: on the real clock of the built daemon (and of
// Redis), a token bucket of 100 refilled at 100 a second, charged 300,
// owes 200: checks are denied, with a debt and a retry_after that count
// down to the instant the debt and one token are back, and admitted from
// then on.
func TestDebtPaidByRefill(t *testing.T) {
	t.Parallel()
	const policy = "domain: ai\ndescriptors:\n  - key: tenant\n    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 100, overdraft: true}\n"
	const owed = 201 * 10 * time.Millisecond // the debt of 200 and one token, at 10ms a token
	// debtAfter is the debt elapsed after the charge: what is left of the
	// 200, rounded up to whole tokens.
	debtAfter := func(elapsed time.Duration) uint64 {
		left := 2*time.Second - elapsed
		if left <= 0 {
			return 0
		}
		return uint64((left + 10*time.Millisecond - 1) / (10 * time.Millisecond))
	}
	for _, useRedis := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "redis"}[useRedis], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ai.yaml")
			if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config", path}
			if useRedis {
				args = append(args, "--store", "redis", "--redis-addr", redistest.Start(t).Addr())
			}
			c := client(t, startProcess(t, args...))
			call := func(op rl.Operation, hits uint32) *rl.DescriptorStatus {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, err := c.ShouldRateLimit(ctx, &rl.ShouldRateLimitRequest{Domain: "ai", Descriptors: []*rl.Descriptor{{
					Entries: []*rl.Entry{{Key: "tenant", Value: "acme"}}, Hits: proto.Uint32(hits), Operation: op}}})
				if err != nil {
					t.Fatal(err)
				}
				return r.Statuses[0]
			}
			// The charge is decided at some instant in [sent, done], a check
			// in [asked, answered]: the bounds below hold whatever the
			// latencies.
			sent := time.Now()
			if st := call(rl.Operation_OPERATION_CHARGE, 300); st.Code != rl.Code_CODE_OVER_LIMIT || !st.Overdrew || st.Debt != 200 {
				t.Fatalf("300 on a bucket of 100: %v, want charged in full (overdraft) and 200 in debt", st)
			}
			done := time.Now()
			for checks := 1; ; checks++ {
				asked := time.Now()
				st := call(rl.Operation_OPERATION_CHECK, 0)
				answered := time.Now()
				switch {
				case st.Code == rl.Code_CODE_OK && answered.Sub(sent) < owed:
					t.Fatalf("check %d was admitted within %v of the charge, before the debt was paid (%v)", checks, answered.Sub(sent), owed)
				case st.Code == rl.Code_CODE_OK && st.Debt != 0:
					t.Fatalf("check %d admitted, owing %d", checks, st.Debt)
				case st.Code == rl.Code_CODE_OK:
					t.Logf("check %d admitted once the debt was paid; the ones before were denied", checks)
					return
				case asked.Sub(done) >= owed:
					t.Fatalf("check %d, %v after the charge, the debt paid: %v", checks, asked.Sub(done), st)
				}
				if least, most := debtAfter(answered.Sub(sent)), debtAfter(asked.Sub(done)); st.Debt < least || st.Debt > most {
					t.Fatalf("check %d: debt %d, want within [%d, %d]: the 200 less what refilled since the charge", checks, st.Debt, least, most)
				}
				wait := st.RetryAfter.AsDuration()
				if earliest, latest := owed-answered.Sub(sent), owed-asked.Sub(done); wait < earliest || wait > latest {
					t.Fatalf("check %d: retry_after %v, want within [%v, %v]: the debt and one token, less the time since the charge", checks, wait, earliest, latest)
				}
				time.Sleep(min(wait, 700*time.Millisecond))
			}
		})
	}
}
