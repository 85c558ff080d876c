package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// TestTenantsDoNotEvictEachOther is the cross-tenant eviction of issue 23:
// billing's drained bucket for bob must stay drained while shop floods the
// store with unique keys under inline limits of 1 a day, which never come
// to rest (so reclaiming finds nothing: only eviction makes room). Shop
// holds far more than its fair share and gives way to itself; billing,
// within its share, keeps bob and can still add buckets during the flood.
func TestTenantsDoNotEvictEachOther(t *testing.T) {
	const room = 1000
	p, err := config.Parse("billing.yaml", []byte(`
domain: billing
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := clock.NewFake(int64(1_700_000_000) * int64(time.Second))
	s := memory.New(c, memory.WithMaxBuckets(room))
	e := engine.New(p, s)
	ask := func(domain, user string, inline *engine.InlineLimit) algorithms.Code {
		t.Helper()
		var resp engine.Response
		err := e.ShouldRateLimit(context.Background(), &engine.Request{Domain: domain, Descriptors: []engine.Descriptor{{
			Entries: []config.Entry{{Key: "user", Value: user}},
			Limit:   inline,
		}}}, &resp)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Code
	}
	ask("billing", "bob", nil)
	if got := ask("billing", "bob", nil); got != algorithms.Denied {
		t.Fatalf("bob's second call in the hour: %v, want denied", got)
	}

	perDay := &engine.InlineLimit{Algorithm: algorithms.FixedWindow, Requests: 1, Period: 24 * time.Hour}
	for i := range 17_000 {
		ask("shop", fmt.Sprint("flood-", i), perDay)
		if i%1000 == 999 {
			c.Advance(time.Second) // the flood takes a while; nothing of it comes to rest
			// A new billing customer during the flood gets a bucket
			// that holds.
			carol := fmt.Sprint("carol-", i)
			ask("billing", carol, nil)
			if got := ask("billing", carol, nil); got != algorithms.Denied {
				t.Fatalf("%s's second call, during the flood: %v, want denied", carol, got)
			}
		}
	}
	if got := ask("billing", "bob", nil); got != algorithms.Denied {
		t.Fatalf("bob after shop's flood: %v, want still denied (the flood evicted billing's bucket)", got)
	}
	if s.Len() > room+18 { // billing, within its share, may pass the bound by its own 18 (see the package doc)
		t.Fatalf("the store holds %d buckets, bound %d", s.Len(), room)
	}
	if s.Evictions() == 0 {
		t.Fatal("no evictions: the flood never filled the store")
	}
}
