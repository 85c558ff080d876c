package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy/xdstest"
)

// flatConfig is a resource of n descriptors side by side, each with a
// value of its own and a limit: the most descriptors per byte.
func flatConfig(n int) *rlsconfv3.RateLimitConfig {
	c := &rlsconfv3.RateLimitConfig{Name: "flat", Domain: "flat", Descriptors: make([]*rlsconfv3.RateLimitDescriptor, n)}
	for i := range c.Descriptors {
		c.Descriptors[i] = &rlsconfv3.RateLimitDescriptor{Key: "k", Value: strconv.Itoa(i),
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5}}
	}
	return c
}

// deepConfig is a resource of one chain of n descriptors, each nested in
// the one before.
func deepConfig(n int) *rlsconfv3.RateLimitConfig {
	d := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5}}
	for range n - 1 {
		d = &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	return &rlsconfv3.RateLimitConfig{Name: "deep", Domain: "deep", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
}

// TestXDSMemory sends the built daemon (default flags) issue 32's xDS
// attacks, each to a daemon of its own — a resource of 100,001
// descriptors (1.8 MB), one nested 9,000 deep (170 KB), one of 2.5 MB —
// and the largest resource the default bounds admit (100,000
// descriptors). Each beyond a bound is NACKed with the bound named; each
// keeps the daemon's peak resident memory (VmHWM) under --max-memory +
// 192 MiB.
func TestXDSMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a daemon per attack")
	}
	huge := flatConfig(1)
	huge.Descriptors[0].Key = strings.Repeat("k", 2_500_000)
	for _, tc := range []struct {
		name string
		c    *rlsconfv3.RateLimitConfig
		want string // in the NACK; "" for an ACK
	}{
		{"100,001 descriptors", flatConfig(100_001), "more than 100000 descriptors (--max-policy-descriptors"},
		{"nested 9,000 deep", deepConfig(9000), "descriptors nested more than 64 deep"},
		{"2.5 MB", huge, "more than the limit of 2097152 (--max-policy-bytes)"},
		{"100,000 descriptors", flatConfig(100_000), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := xdstest.Start(t, nil)
			p := startProcess(t, "--xds-server", srv.Addr(), "--xds-node-id", "n")
			srv.Set("n", "1", tc.c)
			if tc.want == "" {
				srv.WaitRequest(xdstest.IsACK("1"))
			} else {
				nack := srv.WaitRequest(xdstest.IsNACK)
				if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, tc.want) {
					t.Errorf("NACK %.300q, want it to name the bound: %q", msg, tc.want)
				}
			}
			peak := peakRSS(t, p.cmd.Process.Pid)
			t.Logf("%s: daemon peak RSS %d MiB (bound %d MiB)", tc.name, peak>>20, transportRSSBound>>20)
			if peak > transportRSSBound {
				t.Errorf("peak RSS %d MiB, over --max-memory + 192 MiB (%d MiB)", peak>>20, transportRSSBound>>20)
			}
		})
	}
}

// peakRSS returns the most resident memory process pid has held (VmHWM),
// in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if kb, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(kb, "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
