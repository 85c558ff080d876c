package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics/metricstest"
	"github.com/ratelimitd/ratelimitd/internal/testkit/keyflood"
)

// floodRSSBound is the resident memory a daemon with default flags must
// stay under, whatever its callers send.
const floodRSSBound = 512 << 20

// floodValues is how many distinct descriptor values each flood sends
// (rounded down to whole requests): twice the buckets the store holds with
// default flags (memory.DefaultMaxBuckets), so that a flood of a bucket
// per value fills the store to one of its bounds (the number of buckets,
// or their bytes for 64-byte keys) and then evicts as many again.
const floodValues = 2_000_000

// TestKeyFlood floods a daemon started with default flags (the built
// binary, not under the race detector, so that its resident memory is
// what a user would see) with 2,000,000 distinct descriptor values
// over a real gRPC connection, 64 descriptors a request, and samples the
// daemon's VmRSS throughout and for two seconds after: it must stay under
// 512 MiB. Each flood makes every bucket it creates busy for long (hits
// of a whole burst, or an inline limit of one a day), so that nothing is
// reclaimed and the store must evict to stay within its bounds.
//
//   - v1: [path=<1 KB>] on the default policy's per-endpoint rule, hits
//     4000 (its burst): a bucket per value, busy for 80 s.
//   - v1 inline: descriptors of 16 entries of 256-byte keys and 1 KB
//     values (the default request bounds) with an inline limit of one a
//     day: a bucket per 16 values, with a 20 KB key.
//   - Envoy v3: as v1, over envoy.service.ratelimit.v3 with hits_addend.
//   - v1 64-byte keys: as v1 with values of 22 bytes, so that every
//     bucket key is 64 bytes, the longest the store keeps as it is (not
//     as a digest): the costliest buckets, so the bound in bytes binds
//     before the bound on their number.
//
// The client is internal/testkit/keyflood's floodclient, built without
// the race detector, its requests encoded by hand into reused buffers
// (one of each checked here against the generated types), so that it
// costs little beside the daemon: about 2.5 GB sent per variant over
// loopback; at a load of 21, the daemon's CPU 12 s for v1 and for Envoy
// v3, 4 s for v1 inline and 9 s for 64-byte keys, the client's a fifth of
// it (under the race detector, in the test's process, it was as much as
// the daemon's). The variants run one after another, before the
// package's parallel tests (some of whose samples, such as README's
// denial, need a daemon that answers within a tenth of a second).
func TestKeyFlood(t *testing.T) {
	inlineLimit, err := proto.Marshal(&rl.Limit{Algorithm: rl.Algorithm_ALGORITHM_FIXED_WINDOW, Requests: 1, Period: durationpb.New(24 * time.Hour), Name: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	variants := []struct {
		name string
		req  keyflood.Request
		// check decodes one request with the generated types and fails if
		// it is not what req means to send.
		check func(t *testing.T, b []byte)
	}{
		{"v1", keyflood.Request{Method: "/ratelimit.v1.RateLimitService/ShouldRateLimit", Entries: 1, Hits: 4000}, func(t *testing.T, b []byte) {
			var m rl.ShouldRateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || m.Domain != "default" || m.Hits != 4000 || len(m.Descriptors) != 64 ||
				len(m.Descriptors[0].Entries) != 1 || m.Descriptors[0].Entries[0].Key != "path" || len(m.Descriptors[0].Entries[0].Value) != 1024 {
				t.Fatalf("v1 request decodes as %v, %v", &m, err)
			}
		}},
		{"v1 inline", keyflood.Request{Method: "/ratelimit.v1.RateLimitService/ShouldRateLimit", Entries: 16, Limit: inlineLimit}, func(t *testing.T, b []byte) {
			var m rl.ShouldRateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || len(m.Descriptors) != 64 || len(m.Descriptors[63].Entries) != 16 ||
				len(m.Descriptors[63].Entries[15].Key) != 256 || len(m.Descriptors[63].Entries[15].Value) != 1024 || m.Descriptors[63].Limit.GetRequests() != 1 {
				t.Fatalf("v1 inline request decodes as %v, %v", &m, err)
			}
		}},
		{"Envoy v3", keyflood.Request{Method: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", Entries: 1, Hits: 4000}, func(t *testing.T, b []byte) {
			var m rlsv3.RateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || m.Domain != "default" || m.HitsAddend != 4000 || len(m.Descriptors) != 64 ||
				len(m.Descriptors[0].Entries) != 1 || len(m.Descriptors[0].Entries[0].Value) != 1024 {
				t.Fatalf("Envoy v3 request decodes as %v, %v", &m, err)
			}
		}},
		{"v1 64-byte keys", keyflood.Request{Method: "/ratelimit.v1.RateLimitService/ShouldRateLimit", Entries: 1, Hits: 4000, ValueLen: 22}, func(t *testing.T, b []byte) {
			var m rl.ShouldRateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || len(m.Descriptors) != 64 || len(m.Descriptors[0].Entries[0].Value) != 22 {
				t.Fatalf("v1 request decodes as %v, %v", &m, err)
			}
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if v.req.ValueLen == 0 {
				v.req.ValueLen = keyflood.MaxValueLen
			}
			v.check(t, v.req.Encode(nil, nil, 0))
			p := startProcess(t)
			rss := watchRSS(t, p.cmd.Process.Pid)
			start := time.Now()
			client := flood(t, p, v.req, rss)
			during := rss.peak()
			time.Sleep(2 * time.Second)
			after := rss.now()
			t.Logf("%d values in %v (daemon CPU %v, the client's %v): peak RSS %d MiB during, %d MiB 2s after",
				floodValues, time.Since(start).Round(time.Millisecond), processCPU(t, p.cmd.Process.Pid), client.Round(10*time.Millisecond), during>>20, after>>20)
			if peak := rss.peak(); peak > floodRSSBound {
				t.Errorf("RSS peaked at %d MiB, over the %d MiB bound", peak>>20, floodRSSBound>>20)
			}

			m := scrapeProcess(t, p)
			t.Logf("buckets %v, bucket bytes %v of %v, evictions %v", m["ratelimitd_buckets"], m["ratelimitd_bucket_bytes"], m["ratelimitd_bucket_bytes_max"], m["ratelimitd_bucket_evictions_total"])
			if m["ratelimitd_bucket_bytes"] > m["ratelimitd_bucket_bytes_max"] {
				t.Errorf("store holds %v bytes, over its bound of %v", m["ratelimitd_bucket_bytes"], m["ratelimitd_bucket_bytes_max"])
			}
			if v.req.Entries == 1 && m["ratelimitd_bucket_evictions_total"] == 0 {
				t.Errorf("%d busy buckets and no eviction: the store is unbounded", floodValues)
			}
		})
	}
}

// flood runs floodclient (not under the race detector) against p with
// the flood r describes, 4 requests in flight, and returns its CPU time.
// It kills the client, and fails, when the daemon's RSS passes four times
// the bound, to spare the machine.
func flood(t *testing.T, p *process, r keyflood.Request, rss *rssWatch) time.Duration {
	t.Helper()
	bin, err := floodClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-addr", p.grpc, "-method", r.Method, "-values", strconv.Itoa(floodValues),
		"-entries", strconv.Itoa(r.Entries), "-hits", strconv.FormatUint(uint64(r.Hits), 10),
		"-value-len", strconv.Itoa(r.ValueLen), "-limit", hex.EncodeToString(r.Limit))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("floodclient: %v (peak RSS %d MiB)\n%s", err, rss.peak()>>20, stderr.Bytes())
			}
			return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		case <-tick.C:
			if rss.peak() > 4*floodRSSBound {
				cmd.Process.Kill()
				<-exited
				t.Fatalf("RSS %d MiB: flood stopped", rss.peak()>>20)
			}
		}
	}
}

// rssWatch samples a process's VmRSS every 50 ms until the test ends.
type rssWatch struct {
	pid       int
	mu        sync.Mutex
	max, last int64
}

func watchRSS(t *testing.T, pid int) *rssWatch {
	w := &rssWatch{pid: pid}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			w.sample()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait() })
	return w
}

func (w *rssWatch) sample() {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", w.pid))
	if err != nil {
		return // exited
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kb, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err == nil {
				w.mu.Lock()
				w.last, w.max = n<<10, max(w.max, n<<10)
				w.mu.Unlock()
			}
			return
		}
	}
}

// peak returns the largest VmRSS sampled, in bytes.
func (w *rssWatch) peak() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// now samples VmRSS now and returns it, in bytes.
func (w *rssWatch) now() int64 {
	w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// processCPU returns the CPU time process pid has used (user and system).
func processCPU(t *testing.T, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// scrapeProcess reads the daemon's /metrics.
func scrapeProcess(t *testing.T, p *process) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return metricstest.Samples(t, &body)
}
