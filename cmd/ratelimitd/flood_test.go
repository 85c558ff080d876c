package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/metrics/metricstest"
)

// floodRSSBound is the resident memory a daemon with default flags must
// stay under, whatever its callers send.
const floodRSSBound = 512 << 20

// floodValues is how many distinct 1 KB descriptor values each flood
// sends.
const floodValues = 2_000_000

// TestKeyFlood floods a daemon started with default flags (the built
// binary, not under the race detector, so that its resident memory is
// what a user would see) with 2,000,000 distinct 1 KB descriptor values
// over real gRPC connections, 64 descriptors a request, and samples the
// daemon's VmRSS throughout and for two seconds after: it must stay under
// 512 MiB. Each flood makes every bucket it creates busy for long (hits
// of a whole burst, or an inline limit of one a day), so that nothing is
// reclaimed and the store must evict to stay within --max-memory.
//
//   - v1: [path=<1 KB>] on the default policy's per-endpoint rule, hits
//     4000 (its burst): a bucket per value, busy for 80 s.
//   - v1 inline: descriptors of 16 entries of 256-byte keys and 1 KB
//     values (the default request bounds) with an inline limit: a bucket
//     per 16 values with a 20 KB key.
//   - Envoy v3: as v1, over envoy.service.ratelimit.v3 with hits_addend.
//
// Its cost: about 2.5 GB sent per variant over loopback; 15-30 s each on
// two cores.
func TestKeyFlood(t *testing.T) {
	variants := []struct {
		name string
		// entries is how many 1 KB values a descriptor carries.
		entries int
		send    func(ctx context.Context, conn *grpc.ClientConn, values [][]string) error
	}{
		{"v1", 1, sendV1(false)},
		{"v1 inline", 16, sendV1(true)},
		{"Envoy v3", 1, sendEnvoy},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := startProcess(t)
			rss := watchRSS(t, p.cmd.Process.Pid)
			conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			if err := flood(ctx, conn, v.entries, v.send, rss); err != nil {
				t.Fatalf("flood: %v (after %v, peak RSS %d MiB)", err, time.Since(start).Round(time.Millisecond), rss.peak()>>20)
			}
			during := rss.peak()
			time.Sleep(2 * time.Second)
			after := rss.now()
			t.Logf("%d values in %v: peak RSS %d MiB during, %d MiB 2s after", floodValues, time.Since(start).Round(time.Millisecond), during>>20, after>>20)
			if peak := rss.peak(); peak > floodRSSBound {
				t.Errorf("RSS peaked at %d MiB, over the %d MiB bound", peak>>20, floodRSSBound>>20)
			}

			m := scrapeProcess(t, p)
			t.Logf("buckets %v, bucket bytes %v of %v, evictions %v", m["ratelimitd_buckets"], m["ratelimitd_bucket_bytes"], m["ratelimitd_bucket_bytes_max"], m["ratelimitd_bucket_evictions_total"])
			if m["ratelimitd_bucket_bytes"] > m["ratelimitd_bucket_bytes_max"] {
				t.Errorf("store holds %v bytes, over its bound of %v", m["ratelimitd_bucket_bytes"], m["ratelimitd_bucket_bytes_max"])
			}
			if v.entries == 1 && m["ratelimitd_bucket_evictions_total"] == 0 {
				t.Error("2,000,000 busy buckets and no eviction: the store is unbounded")
			}
		})
	}
}

// flood sends floodValues distinct 1 KB values, entries to a descriptor
// and 64 descriptors to a request, from 4 goroutines; it stops early
// when the daemon's RSS passes four times the bound, to spare the machine.
func flood(ctx context.Context, conn *grpc.ClientConn, entries int, send func(context.Context, *grpc.ClientConn, [][]string) error, rss *rssWatch) error {
	const perRequest, senders = 64, 4
	requests := floodValues / entries / perRequest
	var next atomic.Int64
	errs := make(chan error, senders)
	for range senders {
		go func() {
			var value [1024]byte
			for i := range value {
				value[i] = 'a' + byte(i%26)
			}
			descriptors := make([][]string, perRequest)
			for {
				r := next.Add(1) - 1
				if r >= int64(requests) {
					errs <- nil
					return
				}
				if rss.peak() > 4*floodRSSBound {
					errs <- fmt.Errorf("RSS %d MiB: stopped", rss.peak()>>20)
					return
				}
				for d := range descriptors {
					values := make([]string, entries)
					for e := range values {
						// 1024 bytes: the value's number, then filler.
						n := (r*perRequest+int64(d))*int64(entries) + int64(e)
						strconv.AppendInt(value[:0], n, 10)
						values[e] = string(value[:])
					}
					descriptors[d] = values
				}
				if err := send(ctx, conn, descriptors); err != nil {
					errs <- fmt.Errorf("request %d: %w", r, err)
					return
				}
			}
		}()
	}
	var first error
	for range senders {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// floodKeys are the entry keys of the v1 inline flood: 256 bytes each.
var floodKeys = func() []string {
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("%0256d", i)
	}
	return keys
}()

// sendV1 sends one v1 request: with inline, each descriptor's values under
// floodKeys with an inline limit of one a day; else each descriptor
// [path=value] with hits 4000.
func sendV1(inline bool) func(context.Context, *grpc.ClientConn, [][]string) error {
	return func(ctx context.Context, conn *grpc.ClientConn, descriptors [][]string) error {
		req := &rl.ShouldRateLimitRequest{Domain: "default"}
		if !inline {
			req.Hits = 4000
		}
		for _, values := range descriptors {
			d := &rl.Descriptor{}
			for i, v := range values {
				key := "path"
				if inline {
					key = floodKeys[i]
				}
				d.Entries = append(d.Entries, &rl.Entry{Key: key, Value: v})
			}
			if inline {
				d.Limit = &rl.Limit{Algorithm: rl.Algorithm_ALGORITHM_FIXED_WINDOW, Requests: 1, Period: durationpb.New(24 * time.Hour), Name: "flood"}
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		resp, err := rl.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		if err != nil {
			return err
		}
		if resp.OverallCode != rl.Code_CODE_OK {
			return fmt.Errorf("denied %v: every bucket is new", resp.OverallCode)
		}
		return nil
	}
}

// sendEnvoy sends one Envoy v3 request: each descriptor [path=value], with
// hits_addend 4000.
func sendEnvoy(ctx context.Context, conn *grpc.ClientConn, descriptors [][]string) error {
	req := &rlsv3.RateLimitRequest{Domain: "default", HitsAddend: 4000}
	for _, values := range descriptors {
		d := &rlcommonv3.RateLimitDescriptor{}
		for _, v := range values {
			d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: "path", Value: v})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		return err
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		return fmt.Errorf("denied %v: every bucket is new", resp.OverallCode)
	}
	return nil
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
