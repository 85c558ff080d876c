package topdenied_test

import (
	"fmt"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/topdenied"
)

// BenchmarkObserve is the tracker's cost per decision it observes.
func BenchmarkObserve(b *testing.B) {
	b.Run("admitted", func(b *testing.B) {
		tr := topdenied.New(100, topdenied.Plain)
		req, resp := decided("default", []algorithms.Code{algorithms.Allowed}, user("alice"))
		b.ReportAllocs()
		for b.Loop() {
			tr.Observe(req, resp)
		}
	})
	b.Run("denied-known", func(b *testing.B) {
		tr := topdenied.New(100, topdenied.Plain)
		req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user("alice"))
		b.ReportAllocs()
		for b.Loop() {
			tr.Observe(req, resp)
		}
	})
	b.Run("denied-flood", func(b *testing.B) {
		// Every denial a new descriptor: each takes the least counted place.
		tr := topdenied.New(100, topdenied.Plain)
		const n = 1 << 16
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("user-%d", i)
		}
		req, resp := decided("default", []algorithms.Code{algorithms.Denied}, user(""))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			req.Descriptors[0].Entries[1].Value = names[i%n]
			i++
			tr.Observe(req, resp)
		}
	})
}
