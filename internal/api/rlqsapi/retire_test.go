package rlqsapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
	"github.com/ratelimitd/ratelimitd/internal/engine/quotaservice"
	"github.com/ratelimitd/ratelimitd/internal/testkit/envoyfilter"
)

// TestIdleBucketAbandoned: an Envoy (its filter's arithmetic,
// envoyfilter) that reports a bucket with nothing asked for RetireAfter is
// sent abandon_action: its share is released to the other stream once its
// last assignment expires; the Envoy erases the bucket, its next request
// is decided by no_assignment_behavior and reported at once, and the
// daemon answers it as a new client's.
func TestIdleBucketAbandoned(t *testing.T) {
	d := daemontest.Start(t, policy)
	id := map[string]string{"plan": "gold"}
	f := envoyfilter.New(envoyfilter.Config{}, d.Clock.Now())
	e, other := open(t, d), open(t, d)
	exchange := func(want string) {
		t.Helper()
		u := f.Report(id, d.Clock.Now())
		e.report("shop", u)
		a := e.recv(1)["plan=gold"]
		f.Receive(a, d.Clock.Now())
		if got := describe(a); !strings.HasPrefix(got, want) {
			t.Fatalf("+%v: %s, want %s", time.Duration(d.Clock.Now()-daemontest.T0.UnixNano()), got, want)
		}
	}
	if _, first, _ := f.Request(d.Clock.Now()); !first {
		t.Fatal("the first request did not create the bucket")
	}
	exchange("token_bucket max=1 fill=60/1m0s") // 1 request: 60/min
	for i := 1; ; i++ {
		d.Clock.Advance(time.Second)
		other.report("shop", usage(1000, time.Second, "plan", "gold"))
		other.recv(1)
		if time.Duration(i)*time.Second < quotaservice.RetireAfter {
			exchange("token_bucket")
			continue
		}
		exchange("abandon") // describe's text for an action without assignment
		break
	}
	// The abandoned share is released once its last assignment expires:
	// the other stream gets the whole limit.
	d.Clock.Advance(3 * time.Second)
	other.report("shop", usage(1000, time.Second, "plan", "gold"))
	for i := 0; ; i++ {
		got := describe(other.recv(1)["plan=gold"])
		if got == "token_bucket max=1 fill=600/1m0s ttl=2s" {
			break
		}
		if i == 5 {
			t.Fatalf("the other stream, once the abandoned share expired: %s, want all 600/min", got)
		}
	}
	if ok, first, _ := f.Request(d.Clock.Now()); !ok || !first {
		t.Fatal("after abandon_action the next request did not create the bucket anew (allowed by no_assignment_behavior)")
	}
	exchange("DENY_ALL") // reported at once, as a new bucket's: answered (the other holds the limit now)
	if _, body := d.Get(t, "/metrics"); !strings.Contains(body, `ratelimitd_quota_assignments_total{action="abandon",domain="shop"} 1`) {
		t.Error("the abandon_action was not counted")
	}
}
