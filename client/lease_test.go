package client_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// poolPolicy: 2 units in flight per pool, a unit never released freed a
// minute after it was taken.
const poolPolicy = `
domain: work
descriptors:
  - key: pool
    rate_limit: {name: in-flight, algorithm: concurrency, max_in_flight: 2, lease: 1m}
`

var pool = client.NewDescriptor("pool", "jobs")

// poolLeaseEnd is when the units taken at daemontest.T0 free themselves:
// a minute after the end of T0's 10s slot (lease/6), the slots aligned to
// the Unix epoch, as the algorithms package documents.
var poolLeaseEnd = daemontest.T0.Truncate(10 * time.Second).Add(10*time.Second - 1 + time.Minute)

// cut makes the client's calls fail with Unavailable while it is set, as
// an unreachable service would, with the daemon (and its counts) up.
type cut struct{ on atomic.Bool }

func (c *cut) option() client.Option {
	return client.WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if c.on.Load() {
				return status.Error(codes.Unavailable, "cut off")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// releaseErrs records the release failure hook's calls.
type releaseErrs struct {
	mu   sync.Mutex
	errs []error
}

func (r *releaseErrs) option() client.Option {
	return client.WithReleaseFailureHook(func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.errs = append(r.errs, err)
	})
}

func (r *releaseErrs) get() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func acquire(t *testing.T, c *client.Client, ds ...client.Descriptor) *client.Lease {
	t.Helper()
	l, err := c.Acquire(context.Background(), "work", ds...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLease: Acquire admits while in flight + cost ≤ max_in_flight, and
// Release gives the units back, once; a denied lease holds nothing.
func TestLease(t *testing.T) {
	d := daemontest.Start(t, poolPolicy)
	var rpcs calls
	c := newClient(t, d.GRPCAddr(), rpcs.option(), client.WithLocalDeny(100))
	ctx := context.Background()

	a, b := acquire(t, c, pool), acquire(t, c, pool)
	if !a.Allowed || !b.Allowed || a.Source != client.SourceService {
		t.Fatalf("two leases of 2: %v, %v", a.Decision, b.Decision)
	}
	denied := acquire(t, c, pool)
	if denied.Allowed || denied.Policy != "in-flight" || denied.RetryAfter != poolLeaseEnd.Sub(daemontest.T0) {
		t.Fatalf("a third lease: %+v, want denied by in-flight, retry at the lease's end (%v)", denied.Decision, poolLeaseEnd.Sub(daemontest.T0))
	}
	if got := acquire(t, c, pool.WithHits(0)).Response.GetStatuses()[0].GetRemaining(); got != 0 {
		t.Fatalf("in flight after the denial: %d left, want 0", got)
	}

	before := rpcs.n.Load()
	if err := denied.Release(ctx); err != nil || rpcs.n.Load() != before {
		t.Fatalf("releasing a denied lease: %v after %d calls, want nil and none", err, rpcs.n.Load()-before)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); !errors.Is(err, client.ErrReleased) || rpcs.n.Load() != before+1 {
		t.Fatalf("a second release: %v after %d calls, want ErrReleased and one call", err, rpcs.n.Load()-before)
	}
	// The local short-circuit did not remember the denial: a release
	// freed a unit since.
	if l := acquire(t, c, pool); !l.Allowed || l.Source != client.SourceService {
		t.Fatalf("a lease after a release: %v, want admitted by the service", l.Decision)
	}
	if l := acquire(t, c, pool); l.Allowed {
		t.Fatalf("a third lease again: %v, want denied", l.Decision)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := acquire(t, c, pool.WithHits(2)); l.Allowed {
		t.Fatalf("a lease of 2 with 1 free: %v, want denied", l.Decision)
	}
	if l := acquire(t, c, pool); !l.Allowed {
		t.Fatalf("a lease of 1 with 1 free: %v, want admitted", l.Decision)
	}
}

// TestLeaseReleaseLost: a release that cannot reach the service returns
// its error and goes to the hook, and its unit frees itself at its lease's
// end, not a nanosecond sooner; a lease the failure policy admitted holds
// nothing to release.
func TestLeaseReleaseLost(t *testing.T) {
	d := daemontest.Start(t, poolPolicy)
	var off cut
	var lost releaseErrs
	c := newClient(t, d.GRPCAddr(), off.option(), lost.option())
	ctx := context.Background()

	a, b := acquire(t, c, pool), acquire(t, c, pool)
	off.on.Store(true)
	if err := a.Release(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("a release with the service cut off: %v, want Unavailable", err)
	}
	if errs := lost.get(); len(errs) != 1 || status.Code(errs[0]) != codes.Unavailable {
		t.Fatalf("the release hook got %v, want one Unavailable", errs)
	}
	open := acquire(t, c, pool)
	if !open.Allowed || open.Source != client.SourceFailOpen {
		t.Fatalf("a lease with the service cut off: %v, want fail open", open.Decision)
	}
	if err := open.Release(ctx); err != nil || len(lost.get()) != 1 {
		t.Fatalf("releasing a fail-open lease: %v, hook %v; want nothing sent", err, lost.get())
	}
	off.on.Store(false)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// a's unit is still in flight: one free of two.
	for _, step := range []struct {
		name    string
		at      time.Time
		cost    uint32
		allowed bool
	}{
		{"2 units after the lost release", daemontest.T0.Add(time.Second), 2, false},
		{"1ns before the lease ends", poolLeaseEnd.Add(-1), 2, false},
		{"at the lease's end", poolLeaseEnd, 2, true},
	} {
		d.Clock.Set(step.at.UnixNano())
		if l := acquire(t, c, pool.WithHits(step.cost)); l.Allowed != step.allowed {
			t.Fatalf("%s: %v, want allowed %v", step.name, l.Decision, step.allowed)
		}
	}
	if errs := lost.get(); len(errs) != 1 {
		t.Fatalf("the release hook got %v, want the one lost release", errs)
	}
}
