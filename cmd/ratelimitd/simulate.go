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
	fs := flag.NewFlagSet("ratelimitd simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `ratelimitd simulate: replay traffic against limits with the daemon's own algorithms.

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
`)
		fs.PrintDefaults()
	}
	var (
		algs      = fs.String("algorithms", "fixed_window,sliding_window,token_bucket,leaky_bucket,leaky_bucket_queue", "comma-separated `algorithms` to compare (also concurrency)")
		requests  = fs.Int64("requests", 10, "requests per period (a concurrency's max_in_flight)")
		period    = fs.Duration("period", time.Minute, "the limit's period (a concurrency's lease)")
		burst     = fs.Int64("burst", 0, "capacity of the bucket algorithms (0: --requests)")
		t         simulate.Traffic
		times     = fs.String("times", "", "for --pattern recorded: arrival `times` from 0, comma-separated durations (1s,1.5s,…)")
		bin       = fs.Duration("bin", 0, "width of one interval of the CSV and chart (0: a hundredth of --duration)")
		csvPath   = fs.String("csv", "-", "CSV output `file` (- for standard output)")
		svgPath   = fs.String("svg", "", "SVG chart output `file`")
		pattern   = fs.String("pattern", string(simulate.Boundary), "traffic: steady, bursts, boundary, poisson or recorded")
		overdraft = fs.Bool("overdraft", false, "the limits take overdraft charges (a token budget charged after the fact): each request is checked, then charged its whole --cost, into debt if need be")
	)
	fs.Int64Var(&t.Cost, "cost", 1, "what each request uses (tokens, for a token budget)")
	fs.DurationVar(&t.Duration, "duration", 2*time.Minute, "how long to simulate")
	fs.Float64Var(&t.Rate, "rate", 1, "requests a second, for steady and poisson")
	fs.IntVar(&t.Burst, "size", 10, "requests in one burst, for bursts and boundary")
	fs.DurationVar(&t.Every, "every", 30*time.Second, "time between bursts, for bursts")
	fs.Uint64Var(&t.Seed, "seed", 1, "random seed, for poisson")
	fs.DurationVar(&t.Hold, "hold", 0, "for a concurrency: how long each admitted request holds its units before it releases them (0: never released)")
	fs.Float64Var(&t.Unreleased, "unreleased", 0, "for a concurrency: the `fraction` (0 to 1) of admitted requests that never release, left to the lease")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ratelimitd simulate: unexpected argument %q (see --help)\n", fs.Arg(0))
		return 2
	}
	t.Pattern, t.Period = simulate.Pattern(*pattern), *period
	if *times != "" {
		for _, f := range strings.Split(*times, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil {
				fmt.Fprintf(stderr, "ratelimitd simulate: --times: %q is not a duration\n", f)
				return 2
			}
			t.Times = append(t.Times, d)
		}
	}
	var lanes []simulate.Lane
	for _, name := range strings.Split(*algs, ",") {
		alg, err := algorithms.ParseAlgorithm(strings.TrimSpace(name))
		if err != nil {
			fmt.Fprintf(stderr, "ratelimitd simulate: --algorithms: %v\n", err)
			return 2
		}
		b := *burst
		if alg == algorithms.FixedWindow || alg == algorithms.SlidingWindow {
			b = 0
		}
		lane, err := simulate.NewLane(alg, *requests, *period, b)
		if err != nil {
			fmt.Fprintf(stderr, "ratelimitd simulate: %v\n", err)
			return 2
		}
		lane.Overdraft = *overdraft
		lanes = append(lanes, lane)
	}
	res, err := simulate.Run(context.Background(), t, lanes, *bin, *period)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd simulate: %v\n", err)
		return 2
	}
	if err := writeOutput(*csvPath, stdout, res.WriteCSV); err != nil {
		fmt.Fprintf(stderr, "ratelimitd simulate: %v\n", err)
		return 1
	}
	if *svgPath != "" {
		if err := os.WriteFile(*svgPath, []byte(res.SVG()), 0o644); err != nil {
			fmt.Fprintf(stderr, "ratelimitd simulate: %v\n", err)
			return 1
		}
	}
	for _, l := range res.Lanes {
		fmt.Fprintf(stderr, "%-20s admitted %6d  denied %6d  most admitted within %s: %d", l.Name, l.Admitted, l.Denied, *period, l.MaxAdmittedIn)
		if l.Name == algorithms.Concurrency.String() {
			fmt.Fprintf(stderr, "  released %d", l.Released)
		}
		fmt.Fprintln(stderr)
	}
	return 0
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
