package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// statePolicy: a token bucket per user (2 at once, then one every 2s), a
// sliding window per API key (3 per 4s) and a bucket that refills only
// once an hour, to count charges.
const statePolicy = `
domain: shop
descriptors:
  - key: user
    rate_limit: {algorithm: token_bucket, unit: second, unit_multiplier: 2, requests_per_unit: 1, burst: 2}
  - key: api_key
    rate_limit: {algorithm: sliding_window, unit: second, unit_multiplier: 4, requests_per_unit: 3}
  - key: counter
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 1, burst: 1000000}
`

func client(t *testing.T, p *process) rl.RateLimitServiceClient {
	return rl.NewRateLimitServiceClient(dial(t, p))
}

// dial connects to p's gRPC port until the test ends.
func dial(t *testing.T, p *process) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ask(t *testing.T, c rl.RateLimitServiceClient, hits uint32, kv ...string) *rl.ShouldRateLimitResponse {
	t.Helper()
	d := &rl.Descriptor{Hits: proto.Uint32(hits)}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rl.Entry{Key: kv[i], Value: kv[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rl.ShouldRateLimitRequest{Domain: "shop", Descriptors: []*rl.Descriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func stateArgs(t *testing.T, dir string, extra ...string) []string {
	t.Helper()
	policy := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(policy, []byte(statePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	return append([]string{"--config", policy, "--state-file", filepath.Join(dir, "buckets.snap")}, extra...)
}

// TestStateFileAcrossSIGTERM: a user's token bucket and an API key's
// sliding window, drained, then SIGTERM and a new process on the same state
// file: the same caller is still denied, and waiting the retry_after it is
// given admits it.
func TestStateFileAcrossSIGTERM(t *testing.T) {
	t.Parallel()
	args := stateArgs(t, t.TempDir())
	callers := [][]string{{"user", "alice"}, {"api_key", "k1"}}

	first := startProcess(t, args...)
	c := client(t, first)
	// Drain each caller until it is denied for at least a second, so that
	// the restart (a fraction of that) cannot outlast the denial: a drain
	// that straddles a sliding window's boundary can end in a denial that
	// lifts within milliseconds, so such a drain is waited out and redone.
	deniedUntil := map[string]time.Time{}
	for _, who := range callers {
		for attempt := 0; ; attempt++ {
			if attempt > 5 {
				t.Fatalf("%v never denied for a second", who)
			}
			var resp *rl.ShouldRateLimitResponse
			for i := 0; ; i++ {
				if resp = ask(t, c, 1, who...); resp.OverallCode != rl.Code_CODE_OK {
					break
				}
				if i > 10 {
					t.Fatalf("%v never denied", who)
				}
			}
			if wait := resp.RetryAfter.AsDuration(); wait >= time.Second {
				deniedUntil[who[1]] = time.Now().Add(wait - 100*time.Millisecond)
				break
			} else {
				time.Sleep(wait + 10*time.Millisecond)
			}
		}
	}
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	if !strings.Contains(first.logs.String(), `msg="snapshot written"`) {
		t.Fatalf("no snapshot written on SIGTERM:\n%s", first.logs)
	}

	second := startProcess(t, args...)
	if !strings.Contains(second.logs.String(), "restored=2") {
		t.Fatalf("the second process did not restore both buckets:\n%s", second.logs)
	}
	c = client(t, second)
	// Every caller is still denied; then, waiting each one's retry_after
	// admits it.
	retryAt := map[string]time.Time{}
	for _, who := range callers {
		if time.Now().After(deniedUntil[who[1]]) {
			t.Fatalf("%v: the restart outlasted the denial it was given before (the machine is too slow for this test)", who)
		}
		resp := ask(t, c, 1, who...)
		answered := time.Now() // no earlier than the daemon decided
		if resp.OverallCode != rl.Code_CODE_OVER_LIMIT {
			t.Fatalf("%v after the restart: %v, want still over the limit", who, resp)
		}
		wait := resp.RetryAfter.AsDuration()
		if wait <= 0 || wait > 6*time.Second {
			t.Fatalf("%v: retry_after %v", who, wait)
		}
		retryAt[who[1]] = answered.Add(wait)
	}
	for _, who := range callers {
		time.Sleep(time.Until(retryAt[who[1]]))
		if r := ask(t, c, 1, who...); r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("%v denied after waiting its retry_after: %v", who, r)
		}
	}
}

// TestStateFileAfterKill9 charges one bucket as fast as one caller can
// while snapshots are written every 200ms, kills the daemon with SIGKILL,
// and starts it again: the charges the new process has forgotten are the
// loss, and they must all be from the last moments before the kill — about
// one interval. The test logs what it measured.
func TestStateFileAfterKill9(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	args := stateArgs(t, t.TempDir(), "--snapshot-interval", interval.String())
	first := startProcess(t, args...)
	c := client(t, first)

	var at []time.Time // when each admitted charge was answered
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
		if ask(t, c, 1, "counter", "c").OverallCode != rl.Code_CODE_OK {
			t.Fatal("the counter denied a charge")
		}
		at = append(at, time.Now())
	}
	killed := time.Now()
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.wait(t)

	second := startProcess(t, args...)
	if !strings.Contains(second.logs.String(), `msg="snapshot loaded"`) {
		t.Fatalf("the snapshot did not load after SIGKILL:\n%s", second.logs)
	}
	remaining := ask(t, client(t, second), 0, "counter", "c").Statuses[0].Remaining
	kept := int(1_000_000 - remaining)
	lost := len(at) - kept
	if kept <= 0 || lost < 0 {
		t.Fatalf("charged %d, the restarted daemon remembers %d", len(at), kept)
	}
	window := time.Duration(0)
	if lost > 0 {
		window = killed.Sub(at[kept]) // the first forgotten charge
	}
	t.Logf("charged %d in 1.5s; after SIGKILL %d remembered, %d lost: the last %v before the kill (interval %v)",
		len(at), kept, lost, window, interval)
	// The last snapshot started at most an interval before the kill, plus
	// however late the ticker fired and the write took on a busy machine.
	if window > interval+time.Second {
		t.Errorf("lost the charges of the last %v, more than the interval %v allows", window, interval)
	}
}
