package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/httplimit"
	"github.com/ratelimitd/ratelimitd/client/internal/fakeclock"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// benchWrap serves b.N requests through h, one at a time, and fails on
// any answer but 200.
func benchWrap(b *testing.B, h http.Handler) {
	req := httptest.NewRequest("GET", "/orders", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// BenchmarkRate is a request through New's middleware: one charge, over
// real gRPC to a daemon in the process (the round trip dominates).
func BenchmarkRate(b *testing.B) {
	d := daemontest.Start(b, `
domain: default
descriptors:
  - key: generic_key
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`)
	c, err := client.New(d.GRPCAddr(), client.WithClock(fakeclock.New(daemontest.T0)))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchWrap(b, httplimit.New(c, "default", httplimit.Global()).Wrap(ok))
}

// BenchmarkConcurrency is a request through NewConcurrency's middleware:
// an acquire and a release, two round trips.
func BenchmarkConcurrency(b *testing.B) {
	d := daemontest.Start(b, inFlightPolicy)
	c, err := client.New(d.GRPCAddr())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchWrap(b, httplimit.NewConcurrency(c, "default", func(*http.Request) []client.Descriptor {
		return []client.Descriptor{apiPool}
	}).Wrap(ok))
}
