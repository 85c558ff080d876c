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

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rl "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics/metricstest"
)

// floodRSSBound is the resident memory a daemon with default flags must
// stay under, whatever its callers send.
const floodRSSBound = 512 << 20

// floodValues is how many distinct descriptor values each flood sends:
// 28% more than the buckets the store holds with default flags
// (memory.DefaultMaxBuckets), so that a flood of a bucket per value fills
// the store to one of its bounds (the number of buckets, or their bytes
// for 64-byte keys) and then evicts 280,000 buckets or more; more values
// would only repeat that. A multiple of 1,024 (64 descriptors of 16
// entries a request), so that every flood sends exactly this many.
const floodValues = 1_280_000

// TestKeyFlood floods a daemon started with default flags (the built
// binary, not under the race detector, so that its resident memory is
// what a user would see) with 1,280,000 distinct descriptor values
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
// The requests are encoded by hand into reused buffers (and checked
// against the generated types), so that the client, which runs under the
// race detector in CI, costs little beside the daemon. Its cost, about
// 1.3 GB sent per variant over loopback: the daemon's CPU 9 s for v1 and
// for Envoy v3, 4 s for v1 inline, 6 s for 64-byte keys (measured with
// -race at a load of 25), and this process's about as much again. The
// variants run one after another, beside the package's other tests.
func TestKeyFlood(t *testing.T) {
	t.Parallel()
	inlineLimit, err := proto.Marshal(&rl.Limit{Algorithm: rl.Algorithm_ALGORITHM_FIXED_WINDOW, Requests: 1, Period: durationpb.New(24 * time.Hour), Name: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	variants := []struct {
		name string
		req  floodRequest
		// check decodes one request with the generated types and fails if
		// it is not what req means to send.
		check func(t *testing.T, b []byte)
	}{
		{"v1", floodRequest{method: "/ratelimit.v1.RateLimitService/ShouldRateLimit", entries: 1, hits: 4000}, func(t *testing.T, b []byte) {
			var m rl.ShouldRateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || m.Domain != "default" || m.Hits != 4000 || len(m.Descriptors) != 64 ||
				len(m.Descriptors[0].Entries) != 1 || m.Descriptors[0].Entries[0].Key != "path" || len(m.Descriptors[0].Entries[0].Value) != 1024 {
				t.Fatalf("v1 request decodes as %v, %v", &m, err)
			}
		}},
		{"v1 inline", floodRequest{method: "/ratelimit.v1.RateLimitService/ShouldRateLimit", entries: 16, limit: inlineLimit}, func(t *testing.T, b []byte) {
			var m rl.ShouldRateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || len(m.Descriptors) != 64 || len(m.Descriptors[63].Entries) != 16 ||
				len(m.Descriptors[63].Entries[15].Key) != 256 || len(m.Descriptors[63].Entries[15].Value) != 1024 || m.Descriptors[63].Limit.GetRequests() != 1 {
				t.Fatalf("v1 inline request decodes as %v, %v", &m, err)
			}
		}},
		{"Envoy v3", floodRequest{method: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", entries: 1, hits: 4000}, func(t *testing.T, b []byte) {
			var m rlsv3.RateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || m.Domain != "default" || m.HitsAddend != 4000 || len(m.Descriptors) != 64 ||
				len(m.Descriptors[0].Entries) != 1 || len(m.Descriptors[0].Entries[0].Value) != 1024 {
				t.Fatalf("Envoy v3 request decodes as %v, %v", &m, err)
			}
		}},
		{"v1 64-byte keys", floodRequest{method: "/ratelimit.v1.RateLimitService/ShouldRateLimit", entries: 1, hits: 4000, valueLen: 22}, func(t *testing.T, b []byte) {
			var m rl.ShouldRateLimitRequest
			if err := proto.Unmarshal(b, &m); err != nil || len(m.Descriptors) != 64 || len(m.Descriptors[0].Entries[0].Value) != 22 {
				t.Fatalf("v1 request decodes as %v, %v", &m, err)
			}
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if v.req.valueLen == 0 {
				v.req.valueLen = 1024
			}
			v.check(t, v.req.encode(nil, nil, 0))
			p := startProcess(t)
			rss := watchRSS(t, p.cmd.Process.Pid)
			conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			start := time.Now()
			if err := flood(ctx, conn, v.req, rss); err != nil {
				t.Fatalf("flood: %v (after %v, peak RSS %d MiB)", err, time.Since(start).Round(time.Millisecond), rss.peak()>>20)
			}
			during := rss.peak()
			time.Sleep(2 * time.Second)
			after := rss.now()
			t.Logf("%d values in %v (daemon CPU %v, this process's %v): peak RSS %d MiB during, %d MiB 2s after",
				floodValues, time.Since(start).Round(time.Millisecond), processCPU(t, p.cmd.Process.Pid), processCPU(t, os.Getpid()), during>>20, after>>20)
			if peak := rss.peak(); peak > floodRSSBound {
				t.Errorf("RSS peaked at %d MiB, over the %d MiB bound", peak>>20, floodRSSBound>>20)
			}

			m := scrapeProcess(t, p)
			t.Logf("buckets %v, bucket bytes %v of %v, evictions %v", m["ratelimitd_buckets"], m["ratelimitd_bucket_bytes"], m["ratelimitd_bucket_bytes_max"], m["ratelimitd_bucket_evictions_total"])
			if m["ratelimitd_bucket_bytes"] > m["ratelimitd_bucket_bytes_max"] {
				t.Errorf("store holds %v bytes, over its bound of %v", m["ratelimitd_bucket_bytes"], m["ratelimitd_bucket_bytes_max"])
			}
			if v.req.entries == 1 && m["ratelimitd_bucket_evictions_total"] == 0 {
				t.Errorf("%d busy buckets and no eviction: the store is unbounded", floodValues)
			}
		})
	}
}

// floodPerRequest is how many descriptors a flood request carries.
const floodPerRequest = 64

// floodRequest encodes flood requests. The two APIs' requests share their
// field numbers: domain 1, descriptors 2 (entries 1 (key 1, value 2)), and
// the request's hits (hits_addend) 3; a v1 descriptor's limit is its
// field 3.
type floodRequest struct {
	method  string
	entries int    // values per descriptor
	hits    uint32 // the request's hits, when not 0
	limit   []byte // each descriptor's encoded v1 limit, when not nil
	// valueLen is the length of a value (0: 1024), up to 1024.
	valueLen int
}

// encode appends to b the request whose values are numbered from first,
// using scratch for the descriptors, and returns it.
func (r floodRequest) encode(b, scratch []byte, first int64) []byte {
	var value [1024]byte
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "default")
	if r.hits != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.hits))
	}
	n := first
	for range floodPerRequest {
		d := scratch[:0]
		for e := range r.entries {
			key := "path"
			if r.entries > 1 {
				key = floodKeys[e]
			}
			strconv.AppendInt(value[:0], n, 10) // the number, then filler
			n++
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendVarint(d, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(key))+protowire.SizeTag(2)+protowire.SizeBytes(r.valueLen)))
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendString(d, key)
			d = protowire.AppendTag(d, 2, protowire.BytesType)
			d = protowire.AppendBytes(d, value[:r.valueLen])
		}
		if r.limit != nil {
			d = protowire.AppendTag(d, 3, protowire.BytesType)
			d = protowire.AppendBytes(d, r.limit)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
		scratch = d
	}
	return b
}

// floodKeys are the entry keys of the v1 inline flood: 256 bytes each.
var floodKeys = func() []string {
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("%0256d", i)
	}
	return keys
}()

// flood sends floodValues distinct values in requests r encodes,
// from 4 goroutines; every request must be admitted (every bucket is new).
// It stops early when the daemon's RSS passes four times the bound, to
// spare the machine.
func flood(ctx context.Context, conn *grpc.ClientConn, r floodRequest, rss *rssWatch) error {
	const senders = 4
	requests := floodValues / r.entries / floodPerRequest
	var next atomic.Int64
	errs := make(chan error, senders)
	for range senders {
		go func() {
			var req, scratch []byte
			var resp rawMessage
			for {
				i := next.Add(1) - 1
				if i >= int64(requests) {
					errs <- nil
					return
				}
				if rss.peak() > 4*floodRSSBound {
					errs <- fmt.Errorf("RSS %d MiB: stopped", rss.peak()>>20)
					return
				}
				req = r.encode(req[:0], scratch, i*int64(floodPerRequest*r.entries))
				msg := rawMessage(req)
				if err := conn.Invoke(ctx, r.method, &msg, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
				// overall_code is field 1 in both APIs; 1 is OK in both.
				if code, err := varintField(resp, 1); err != nil || code != 1 {
					errs <- fmt.Errorf("request %d: overall code %d (%v), want OK: every bucket is new", i, code, err)
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

// rawMessage is an encoded protobuf message, sent and received as it is.
type rawMessage []byte

// rawCodec passes rawMessages through gRPC unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*rawMessage), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*rawMessage) = append((*v.(*rawMessage))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// varintField returns the varint field num of the encoded message b (0
// when absent, as proto3 leaves a zero value out).
func varintField(b []byte, num protowire.Number) (uint64, error) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b)
			return v, protowire.ParseError(min(l, 0))
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return 0, nil
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
