package memory_test

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/store"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	"github.com/ratelimitd/ratelimitd/internal/store/storetest"
)

// TestConformance runs the suite that every store passes alike, with 64
// callers on one bucket at once.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c *clock.Fake) store.Store {
		return memory.New(c)
	}, storetest.Options{Goroutines: 64})
}
