package loadgen

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/status"
)

// Latencies are recorded in microseconds from 1µs to maxLatency, to
// latencySigFigs significant decimal digits (HDR histogram: a recorded
// value is within 0.1% of the true one). A longer latency is recorded as
// maxLatency; the exact longest is kept apart (Latency.Max).
const (
	maxLatency     = time.Minute
	latencySigFigs = 3
)

// recorder counts outcomes and records latencies from many goroutines:
// each goroutine records into one of a few shards, merged at the end.
type recorder struct {
	shards []recShard
	// live counts, for the progress line
	counts [numOutcomes]atomic.Int64
}

type recShard struct {
	mu     sync.Mutex
	hist   *hdrhistogram.Histogram
	max    time.Duration
	errors map[string]*ErrorCount
	_      [64]byte // keep shards' locks on separate cache lines
}

func newRecorder(shards int) *recorder {
	r := &recorder{shards: make([]recShard, shards)}
	for i := range r.shards {
		r.shards[i].hist = newHistogram()
		r.shards[i].errors = map[string]*ErrorCount{}
	}
	return r
}

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, maxLatency.Microseconds(), latencySigFigs)
}

// record adds one request that took d and ended in o (err when Failed)
// to shard i.
func (r *recorder) record(i int, d time.Duration, o Outcome, err error) {
	r.counts[o].Add(1)
	s := &r.shards[i%len(r.shards)]
	us := min(max(d.Microseconds(), 1), maxLatency.Microseconds())
	s.mu.Lock()
	s.hist.RecordValue(us) // in range by construction
	s.max = max(s.max, d)
	if o == Failed {
		code := "BadResponse"
		if st, ok := status.FromError(err); ok {
			code = st.Code().String()
		}
		e := s.errors[code]
		if e == nil {
			e = &ErrorCount{Code: code, Example: err.Error()}
			s.errors[code] = e
		}
		e.Count++
	}
	s.mu.Unlock()
}

// total is the number of requests recorded so far.
func (r *recorder) total() int64 {
	var n int64
	for i := range r.counts {
		n += r.counts[i].Load()
	}
	return n
}

// merged returns every shard's latencies in one histogram, the longest
// latency exactly, and the errors by code.
func (r *recorder) merged() (*hdrhistogram.Histogram, time.Duration, map[string]*ErrorCount) {
	h := newHistogram()
	var longest time.Duration
	errs := map[string]*ErrorCount{}
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		h.Merge(s.hist)
		longest = max(longest, s.max)
		for code, e := range s.errors {
			if m := errs[code]; m != nil {
				m.Count += e.Count
			} else {
				c := *e
				errs[code] = &c
			}
		}
		s.mu.Unlock()
	}
	return h, longest, errs
}
