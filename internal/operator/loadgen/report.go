package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run, over its measured window (after the
// warmup). Every request sent in the window is counted exactly once:
// Requests = Counts.Admitted + Counts.Denied + Counts.OverCapacity +
// Counts.Errors.
type Report struct {
	Target string `json:"target"`
	API    API    `json:"api"`
	// Mode is "closed" (Callers callers, each waiting for its answer before
	// sending again) or "open" (requests sent at TargetRate whatever the
	// answers, at most MaxInFlight at once).
	Mode        string  `json:"mode"`
	Callers     int     `json:"callers,omitempty"`
	TargetRate  float64 `json:"target_rate,omitempty"`
	MaxInFlight int     `json:"max_in_flight,omitempty"`
	Conns       int     `json:"conns"`
	Seed        uint64  `json:"seed"`
	// Workload is the domain and then each descriptor, as the flags write them.
	Workload []string `json:"workload"`
	WarmupS  float64  `json:"warmup_s"`
	// ElapsedS is the measured window, in seconds: --duration, or less when
	// --requests ended it sooner or the run was interrupted.
	ElapsedS          float64 `json:"elapsed_s"`
	Requests          int64   `json:"requests"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	// LatencyUS is in microseconds; in an open loop, measured from the
	// instant each request was due to be sent (so time spent waiting to be
	// sent counts), in a closed loop from the instant it was sent.
	LatencyUS Latency       `json:"latency_us"`
	Counts    Counts        `json:"counts"`
	Ratios    Ratios        `json:"ratios"`
	Errors    []ErrorCount  `json:"errors,omitempty"`
	Servers   []ServerStats `json:"servers,omitempty"`
	Client    ClientStats   `json:"client"`
	Precision string        `json:"precision"`
}

// Latency holds percentiles of the measured latencies, in microseconds,
// to 3 significant digits (Max is exact).
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Counts are the requests by outcome (see Outcome).
type Counts struct {
	Admitted     int64 `json:"admitted"`
	Denied       int64 `json:"denied"`
	OverCapacity int64 `json:"over_capacity"`
	Errors       int64 `json:"errors"`
}

// Ratios are Counts divided by Requests (all 0 when nothing was sent).
type Ratios struct {
	Admitted     float64 `json:"admitted"`
	Denied       float64 `json:"denied"`
	OverCapacity float64 `json:"over_capacity"`
	Errors       float64 `json:"errors"`
}

// ErrorCount is how many requests failed with one gRPC code (BadResponse:
// an answer with an overall code that is neither OK nor OVER_LIMIT), and
// the first such error's message.
type ErrorCount struct {
	Code    string `json:"code"`
	Count   int64  `json:"count"`
	Example string `json:"example"`
}

// ServerStats describe one of the server's processes (--pid) over the
// measured window, from /proc/PID/stat: CPU is user + system time, counted
// by the kernel in 10ms ticks, so a window should hold at least a few
// seconds of CPU.
type ServerStats struct {
	PID int `json:"pid"`
	// Name is the process's command name (/proc/PID/comm).
	Name       string  `json:"name"`
	CPUSeconds float64 `json:"cpu_s"`
	// CPUPerRequestUS is CPUSeconds per request, in microseconds: the
	// server's cost of one request; 1e6 / CPUPerRequestUS requests per
	// second keep one core busy.
	CPUPerRequestUS float64 `json:"cpu_per_request_us"`
	// CoresBusy is CPUSeconds / elapsed: how many cores it used on average.
	CoresBusy float64 `json:"cores_busy"`
	// RSSBytes is its resident memory at the end; PeakRSSBytes the largest
	// seen once a second during the window.
	RSSBytes     int64 `json:"rss_bytes"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// ClientStats describe the load tool itself over the measured window: when
// its CPU per request approaches the machine's capacity, the tool, not the
// server, limits the rate.
type ClientStats struct {
	CPUSeconds      float64 `json:"cpu_s"`
	CPUPerRequestUS float64 `json:"cpu_per_request_us"`
	// LateSends counts open-loop requests sent more than 1ms after they
	// were due (all callers busy, or the tool short of CPU); their wait is
	// part of their latency.
	LateSends int64 `json:"late_sends,omitempty"`
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("target\t%s (%s)", r.Target, apiName(r.API))
	if r.Mode == "open" {
		p("load\topen loop at %s/s, at most %d in flight, over %d connection(s)", num(r.TargetRate), r.MaxInFlight, r.Conns)
	} else {
		p("load\tclosed loop, %d caller(s) over %d connection(s)", r.Callers, r.Conns)
	}
	p("workload\t%s (seed %d)", strings.Join(r.Workload, " | "), r.Seed)
	p("measured\t%.1fs after %s warmup", r.ElapsedS, time.Duration(r.WarmupS*float64(time.Second)))
	p("requests\t%d\t%s/s", r.Requests, num(r.RequestsPerSecond))
	l := r.LatencyUS
	p("latency\tp50 %s  p90 %s  p99 %s  p99.9 %s  max %s", us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.Max))
	p("admitted\t%d\t%.2f%%", r.Counts.Admitted, 100*r.Ratios.Admitted)
	p("denied\t%d\t%.2f%%", r.Counts.Denied, 100*r.Ratios.Denied)
	p("over capacity\t%d\t%.2f%%", r.Counts.OverCapacity, 100*r.Ratios.OverCapacity)
	p("errors\t%d\t%.2f%%", r.Counts.Errors, 100*r.Ratios.Errors)
	for _, e := range r.Errors {
		p("  %s\t%d\t%s", e.Code, e.Count, e.Example)
	}
	for _, s := range r.Servers {
		p("server\t%s (pid %d): %s CPU per request (%.2fs CPU, %.2f cores busy), RSS %s (peak %s)",
			s.Name, s.PID, us(s.CPUPerRequestUS), s.CPUSeconds, s.CoresBusy, mib(s.RSSBytes), mib(s.PeakRSSBytes))
	}
	c := r.Client
	line := fmt.Sprintf("this tool: %s CPU per request (%.2fs CPU)", us(c.CPUPerRequestUS), c.CPUSeconds)
	if r.Mode == "open" {
		line += fmt.Sprintf(", %d sent more than 1ms late", c.LateSends)
	}
	p("client\t%s", line)
	return tw.Flush()
}

func apiName(a API) string {
	if a == APIEnvoy {
		return "envoy.service.ratelimit.v3"
	}
	return "ratelimit.v1"
}

// us formats microseconds readably.
func us(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gms", v/1e3)
	}
	return fmt.Sprintf("%.3gµs", v)
}

func num(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// sortedErrors returns errs by falling count, then code.
func sortedErrors(errs map[string]*ErrorCount) []ErrorCount {
	out := make([]ErrorCount, 0, len(errs))
	for _, e := range errs {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Code < out[j].Code
	})
	return out
}
