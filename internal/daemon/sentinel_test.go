package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/store/guard"
	redisstore "github.com/ratelimitd/ratelimitd/internal/store/redis"
	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// failoverPolicy: 1000 requests, one back a day: no refill during the test,
// so that what is left counts the charges exactly.
const failoverPolicy = `
domain: failover
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: day, unit_multiplier: 1000, requests_per_unit: 1000}
`

// TestSentinelFailover: a daemon reaching Redis through three real
// sentinels (--redis-sentinel) charges the master; the master is killed
// (its writes replicated first); while the sentinels fail over, requests
// are decided by the failure mode (closed: denied, nothing charged); within
// a second of the sentinels naming the replica the new master, the daemon
// charges it; and what the bucket has left afterwards is exactly its
// capacity less every admitted request: none charged twice, none lost.
func TestSentinelFailover(t *testing.T) {
	sn := redistest.StartSentinels(t)
	d := daemontest.Start(t, failoverPolicy, func(c *daemon.Config) {
		c.Store = "redis"
		c.Redis = redisstore.Config{SentinelMaster: redistest.SentinelMaster, SentinelAddrs: strings.Split(sn.Addrs(), ","), Timeout: 250 * time.Millisecond}
		c.RedisGuard.FailureMode = guard.FailClosed
	})
	client := rl.NewRateLimitServiceClient(d.Dial(t))
	call := func(hits uint32) (*rl.ShouldRateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dd := desc("tenant", "acme")
		if hits == 0 {
			dd = peek(dd)
		}
		return client.ShouldRateLimit(ctx, req("failover", dd))
	}
	admitted := 0
	for range 20 {
		r, err := call(1)
		if err != nil || r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("before the failover: %v, %v; want admitted", r, err)
		}
		admitted++
	}
	if got := sn.Master.Cli(t, "WAIT", "1", "5000"); strings.TrimSpace(got) != "1" {
		t.Fatalf("WAIT for the replica: %q", got)
	}
	oldMaster := sn.MasterAddr(t)
	sn.Master.Stop()
	killed := time.Now()

	// lastFailed is when the last call decided by the failure mode was
	// sent: the daemon had not yet charged the new master then.
	var switched, recovered, lastFailed time.Time
	failureMode := 0
	for deadline := killed.Add(30 * time.Second); recovered.IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no request admitted within 30s of the master's death (%d decided by the failure mode; sentinels switched at %v)", failureMode, switched)
		}
		if switched.IsZero() && sn.MasterAddr(t) != oldMaster {
			switched = time.Now()
		}
		sent := time.Now()
		r, err := call(1)
		switch {
		case err != nil:
			t.Fatalf("during the failover: %v; want a decision (the failure mode's)", err)
		case r.OverallCode == rl.Code_CODE_OK:
			recovered = time.Now()
			admitted++
		default:
			failureMode++
			lastFailed = sent
		}
	}
	for switched.IsZero() {
		if sn.MasterAddr(t) != oldMaster {
			switched = time.Now()
		}
	}
	if got := sn.MasterAddr(t); got != sn.Replica.Addr() {
		t.Fatalf("the sentinels' master is %s, want the replica %s", got, sn.Replica.Addr())
	}
	t.Logf("master killed; sentinels switched after %v; the daemon charged the new master %v after that; %d requests decided by the failure mode meanwhile",
		switched.Sub(killed).Round(time.Millisecond), recovered.Sub(switched).Round(time.Millisecond), failureMode)
	// Measured from the call's sending, not from its answer or the next
	// poll: the test's own pauses (redis-cli, a loaded machine) are not
	// the daemon's lag.
	if lag := lastFailed.Sub(switched); lag > time.Second {
		t.Errorf("a call sent %v after the sentinels named the new master was still decided by the failure mode, want the daemon on the new master within a second", lag)
	}
	for range 10 {
		r, err := call(1)
		if err != nil || r.OverallCode != rl.Code_CODE_OK {
			t.Fatalf("after the failover: %v, %v; want admitted", r, err)
		}
		admitted++
	}
	r, err := call(0)
	if err != nil {
		t.Fatal(err)
	}
	if left := r.Statuses[0].Remaining; left != uint64(1000-admitted) {
		t.Errorf("left after %d admitted requests: %d, want %d (a charge lost or made twice)", admitted, left, 1000-admitted)
	}
}
