package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/operator/simulate"
)

// simulateCmd runs `ratelimitd simulate`: traffic against limits on a
// simulated clock, written as CSV and an SVG chart.
func simulateCmd(args []string, stdout, stderr io.Writer) int {
	fs, f := newSimulateFlags(stderr)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ratelimitd simulate: unexpected argument %q (see --help)\n", fs.Arg(0))
		return 2
	}
	res, err := f.run()
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd simulate: %v\n", err)
		return 2
	}
	if err := writeOutput(f.csvPath, stdout, res.WriteCSV); err != nil {
		fmt.Fprintf(stderr, "ratelimitd simulate: %v\n", err)
		return 1
	}
	if f.svgPath != "" {
		if err := os.WriteFile(f.svgPath, []byte(res.SVG()), 0o644); err != nil {
			fmt.Fprintf(stderr, "ratelimitd simulate: %v\n", err)
			return 1
		}
	}
	for _, l := range res.Lanes {
		fmt.Fprintf(stderr, "%-20s admitted %6d  denied %6d  most admitted within %s: %d", l.Name, l.Admitted, l.Denied, f.period, l.MaxAdmittedIn)
		if l.Name == algorithms.Concurrency.String() {
			fmt.Fprintf(stderr, "  released %d", l.Released)
		}
		fmt.Fprintln(stderr)
	}
	return 0
}

// simulateFlags are simulate's flags: the traffic, in t, and the limits.
type simulateFlags struct {
	t         simulate.Traffic
	algs      string
	requests  int64
	period    time.Duration
	burst     int64
	times     string
	bin       time.Duration
	csvPath   string
	svgPath   string
	pattern   string
	overdraft bool
}

// newSimulateFlags returns simulate's flag set, with its --help, and the
// flags it parses into.
func newSimulateFlags(stderr io.Writer) (*flag.FlagSet, *simulateFlags) {
	fs := flag.NewFlagSet("ratelimitd simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage)
		fs.PrintDefaults()
	}
	f := &simulateFlags{}
	t := &f.t
	fs.StringVar(&f.algs, "algorithms", "fixed_window,sliding_window,token_bucket,leaky_bucket,leaky_bucket_queue", "comma-separated `algorithms` to compare (also concurrency)")
	fs.Int64Var(&f.requests, "requests", 10, "requests per period (a concurrency's max_in_flight)")
	fs.DurationVar(&f.period, "period", time.Minute, "the limit's period (a concurrency's lease)")
	fs.Int64Var(&f.burst, "burst", 0, "capacity of the bucket algorithms (0: --requests)")
	fs.StringVar(&f.times, "times", "", "for --pattern recorded: arrival `times` from 0, comma-separated durations (1s,1.5s,…)")
	fs.DurationVar(&f.bin, "bin", 0, "width of one interval of the CSV and chart (0: a hundredth of --duration)")
	fs.StringVar(&f.csvPath, "csv", "-", "CSV output `file` (- for standard output)")
	fs.StringVar(&f.svgPath, "svg", "", "SVG chart output `file`")
	fs.StringVar(&f.pattern, "pattern", string(simulate.Boundary), "traffic: steady, bursts, boundary, poisson or recorded")
	fs.BoolVar(&f.overdraft, "overdraft", false, "the limits take overdraft charges (a token budget charged after the fact): each request is checked, then charged its whole --cost, into debt if need be")
	fs.Int64Var(&t.Cost, "cost", 1, "what each request uses (tokens, for a token budget)")
	fs.DurationVar(&t.Duration, "duration", 2*time.Minute, "how long to simulate")
	fs.Float64Var(&t.Rate, "rate", 1, "requests a second, for steady and poisson")
	fs.IntVar(&t.Burst, "size", 10, "requests in one burst, for bursts and boundary")
	fs.DurationVar(&t.Every, "every", 30*time.Second, "time between bursts, for bursts")
	fs.Uint64Var(&t.Seed, "seed", 1, "random seed, for poisson")
	fs.DurationVar(&t.Hold, "hold", 0, "for a concurrency: how long each admitted request holds its units before it releases them (0: never released)")
	fs.Float64Var(&t.Unreleased, "unreleased", 0, "for a concurrency: the `fraction` (0 to 1) of admitted requests that never release, left to the lease")
	return fs, f
}

const simulateUsage = `ratelimitd simulate: replay traffic against limits with the daemon's own algorithms.

Usage:
  ratelimitd simulate [flags]

Every algorithm named by --algorithms sees the same traffic. The defaults
reproduce the window-boundary comparison: 10 requests a minute, 10 sent just
before the first boundary and 10 at it — a fixed window admits 20 within a
second, the others 10.

A concurrency (--algorithms concurrency) counts requests in flight: --requests
is its max_in_flight and --period its lease. Each request it admits holds its
--cost for --hold, then releases it (as Envoy's stream-done call would), but
for the --unreleased fraction, which never does, as callers that crashed:
only the lease frees their units. --hold 0 releases nothing. The other
algorithms ignore --hold. For example, 2 in flight with a 1m lease, a request
a second holding 1.5s, one in four never released:

  ratelimitd simulate --algorithms concurrency --requests 2 --period 1m \
    --pattern steady --rate 1 --hold 1.5s --unreleased 0.25 --duration 5m

Writes one CSV row per algorithm and interval to --csv (default: standard
output), and the chart to --svg when given. Prints each algorithm's totals to
standard error.

Flags:
`

// run simulates the traffic against a lane per algorithm; its error is a
// usage error, naming the flag when it is one flag's.
func (f *simulateFlags) run() (*simulate.Result, error) {
	t := f.t
	t.Pattern, t.Period = simulate.Pattern(f.pattern), f.period
	if f.times != "" {
		for _, s := range strings.Split(f.times, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--times: %q is not a duration", s)
			}
			t.Times = append(t.Times, d)
		}
	}
	algs, err := simulate.ParseAlgorithms(f.algs)
	if err != nil {
		return nil, fmt.Errorf("--algorithms: %v", err)
	}
	lanes, err := simulate.CompareLanes(algs, f.requests, f.period, f.burst, f.overdraft)
	if err != nil {
		return nil, err
	}
	return simulate.Run(context.Background(), t, lanes, f.bin, f.period)
}

// writeOutput writes with write to the file at path, or to stdout for "-".
func writeOutput(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "-" {
		return write(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
