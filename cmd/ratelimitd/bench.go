package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/internal/operator/loadgen"
)

// defaultBenchDescriptor is the embedded default policy's per-user tier.
const defaultBenchDescriptor = "path=/orders,user=user-{1..100000}"

// bench is `ratelimitd bench`: flags into a loadgen.Config, the run, the
// report.
func bench(args []string, stdout, stderr io.Writer) int {
	fs, f := newBenchFlags(stderr)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "ratelimitd bench: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr(fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0)))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if f.serveEmpty != "" {
		if f.cfg.Target != "" {
			return usageErr(errors.New("--serve-empty serves; it takes no --target"))
		}
		return serveEmptyServer(ctx, f.serveEmpty, f.cfg.AllowRemote, stderr)
	}
	cfg, err := f.config(fs, stderr)
	if err != nil {
		return usageErr(err)
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err == nil && f.jsonOut {
		err = rep.WriteJSON(stdout)
	} else if err == nil {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd bench: %v\n", err)
		return 1
	}
	return 0
}

// benchFlags are bench's flags: those loadgen.Config holds as they are
// parsed, in cfg, and the others, which benchFlags.config turns into
// cfg's fields.
type benchFlags struct {
	cfg         loadgen.Config
	apiName     string
	domain      string
	descriptors []string
	hits        uint
	workload    string
	rate        rateFlag
	jsonOut     bool
	progress    bool
	serveEmpty  string
}

// newBenchFlags returns bench's flag set, with its --help, and the flags
// it parses into.
func newBenchFlags(stderr io.Writer) (*flag.FlagSet, *benchFlags) {
	fs := flag.NewFlagSet("ratelimitd bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	f := &benchFlags{}
	cfg := &f.cfg
	fs.StringVar(&cfg.Target, "target", "", "`HOST:PORT` of the server to load")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "load a target that is not a loopback address (or serve --serve-empty on one)")
	fs.StringVar(&f.apiName, "api", "v1", "`API` to call: v1 (ratelimit.v1) or envoy (envoy.service.ratelimit.v3, as envoyproxy/ratelimit serves)")
	fs.StringVar(&f.domain, "domain", "default", "the requests' `domain`")
	fs.Func("descriptor", "a descriptor of every request, as `KEY=VALUE[,KEY=VALUE...]`, most general entry first; repeat it for several descriptors per request", func(s string) error {
		f.descriptors = append(f.descriptors, s)
		return nil
	})
	fs.UintVar(&f.hits, "hits", 0, "each request's cost per descriptor (v1 hits, Envoy hits_addend); 0 sends none, read as 1")
	fs.StringVar(&f.workload, "workload", "", "YAML `file` with the domain and descriptors (instead of --domain, --descriptor and --hits)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the values drawn from key spaces")
	fs.IntVar(&cfg.Callers, "c", loadgen.DefaultCallers, "closed loop: concurrent callers")
	fs.Var(&f.rate, "rate", "open loop: `N` requests a second (also written N/s)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", loadgen.DefaultMaxInFlight, "open loop: most requests awaiting answers; a request due beyond it waits, and its wait counts in its latency")
	fs.IntVar(&cfg.Conns, "conns", loadgen.DefaultConns, "HTTP/2 connections the calls are spread over")
	fs.DurationVar(&cfg.Duration, "duration", loadgen.DefaultDuration, "how long to measure")
	fs.Int64Var(&cfg.MaxRequests, "requests", 0, "stop measuring after `N` requests (0: no limit), if --duration has not ended the run before")
	fs.DurationVar(&cfg.Warmup, "warmup", 2e9, "how long to send before measuring")
	fs.DurationVar(&cfg.Timeout, "timeout", loadgen.DefaultTimeout, "each request's deadline, from its send (open loop: from when it was due); past it, a DeadlineExceeded error")
	fs.Func("pid", "the server's processes on this machine, as `PID[,PID...]` (the daemon; its Redis too, say): report the CPU per request and memory of each (from /proc)", func(s string) error {
		for _, f := range strings.Split(s, ",") {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 {
				return fmt.Errorf("%q is not a process id", f)
			}
			cfg.PIDs = append(cfg.PIDs, pid)
		}
		return nil
	})
	fs.BoolVar(&cfg.TLS.Enabled, "tls", false, "connect with TLS (implied by the other --tls flags)")
	fs.StringVar(&cfg.TLS.CA, "tls-ca", "", "PEM CA certificates `file` to verify the server with (default: the system's)")
	fs.StringVar(&cfg.TLS.Cert, "tls-cert", "", "PEM client certificate `file`, for mutual TLS (with --tls-key)")
	fs.StringVar(&cfg.TLS.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.StringVar(&cfg.TLS.ServerName, "tls-server-name", "", "`name` the server's certificate must carry (default: the target's host)")
	fs.BoolVar(&f.jsonOut, "json", false, "write the report as JSON")
	fs.BoolVar(&f.progress, "progress", true, "write a progress line to stderr once a second (--progress=false to stop)")
	fs.StringVar(&f.serveEmpty, "serve-empty", "", "serve the empty baseline server on `ADDR` until SIGINT/SIGTERM instead of loading anything")
	return fs, f
}

const benchUsage = `ratelimitd bench: load a rate-limit service and report throughput, latency and decisions.

Usage:
  ratelimitd bench --target HOST:PORT [flags]     closed loop: -c callers, each waiting for its answer
  ratelimitd bench --target HOST:PORT --rate N/s  open loop: N requests a second whatever the answers;
                                                  latency counted from when each was due
  ratelimitd bench --serve-empty ADDR             serve both APIs answering OK to everything: the
                                                  baseline a server's cost per request is read against

What is sent: --domain and --descriptor (repeat it for several descriptors per request), or
--workload FILE. A value is fixed text or a key space: 'user={1..100000}' draws uniformly,
'user={1..100000:zipf}' Zipf-skewed (exponent 1.1; ':zipf=1.5' for another, above 1). Quote
braces from the shell. Without either: --domain default --descriptor '` + defaultBenchDescriptor + `'.

Only loopback targets are loaded unless --allow-remote. Progress goes to stderr once a second;
the report to stdout, as a table or with --json as JSON. SIGINT stops early and reports.

Flags:
`

// config returns the run's loadgen.Config from the flags fs parsed, or
// the usage error, naming its flag; progress goes to stderr.
func (f *benchFlags) config(fs *flag.FlagSet, stderr io.Writer) (loadgen.Config, error) {
	cfg := f.cfg
	if cfg.Target == "" {
		return cfg, errors.New("--target HOST:PORT is required")
	}
	var err error
	if cfg.API, err = loadgen.ParseAPI(f.apiName); err != nil {
		return cfg, fmt.Errorf("--%v", err)
	}
	if cfg.Workload, err = f.workloadOf(fs); err != nil {
		return cfg, err
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"c", cfg.Callers}, {"conns", cfg.Conns}, {"max-in-flight", cfg.MaxInFlight}} {
		if c.v < 1 {
			return cfg, fmt.Errorf("-%s %d: want at least 1", c.name, c.v)
		}
	}
	if cfg.Duration <= 0 || cfg.Warmup < 0 || cfg.Timeout <= 0 || cfg.MaxRequests < 0 {
		return cfg, errors.New("--duration and --timeout must be above 0, --warmup and --requests not below")
	}
	cfg.Rate = float64(f.rate)
	cfg.TLS.Enabled = cfg.TLS.Enabled || cfg.TLS.CA != "" || cfg.TLS.Cert != "" || cfg.TLS.Key != "" || cfg.TLS.ServerName != ""
	if f.progress {
		cfg.Progress = stderr
	}
	return cfg, nil
}

// workloadOf returns what the requests carry: --workload's file, or
// --domain, --descriptor (defaultBenchDescriptor when none is given) and
// --hits; both at once is a usage error.
func (f *benchFlags) workloadOf(fs *flag.FlagSet) (*loadgen.Workload, error) {
	if f.hits > 1<<32-1 {
		return nil, fmt.Errorf("--hits %d: at most %d", f.hits, uint32(1<<32-1))
	}
	if f.workload != "" {
		set := false
		fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "domain" || fl.Name == "descriptor" || fl.Name == "hits" })
		if set {
			return nil, errors.New("--workload holds the domain, descriptors and hits; drop --domain, --descriptor and --hits")
		}
		w, err := loadgen.LoadWorkload(f.workload)
		if err != nil {
			return nil, fmt.Errorf("--workload: %v", err)
		}
		return w, nil
	}
	descriptors := f.descriptors
	if len(descriptors) == 0 {
		descriptors = []string{defaultBenchDescriptor}
	}
	w := &loadgen.Workload{Domain: f.domain, Hits: uint32(f.hits)}
	for _, s := range descriptors {
		d, err := loadgen.ParseDescriptor(s)
		if err != nil {
			return nil, fmt.Errorf("--descriptor: %v", err)
		}
		w.Descriptors = append(w.Descriptors, d)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return w, nil
}

// serveEmptyServer serves loadgen.RegisterEmpty on addr until ctx is done.
func serveEmptyServer(ctx context.Context, addr string, allowRemote bool, stderr io.Writer) int {
	if !allowRemote {
		if err := loadgen.CheckLoopback(ctx, addr, nil); err != nil {
			fmt.Fprintf(stderr, "ratelimitd bench: --serve-empty: %v\n", err)
			return 2
		}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd bench: --serve-empty: %v\n", err)
		return 1
	}
	g := grpc.NewServer()
	loadgen.RegisterEmpty(g)
	fmt.Fprintf(stderr, "ratelimitd bench: empty rate-limit service (v1 and Envoy v3, every answer OK) on %s\n", lis.Addr())
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
	if err := g.Serve(lis); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "ratelimitd bench: --serve-empty: %v\n", err)
		return 1
	}
	return 0
}

// rateFlag is requests per second, written N or N/s.
type rateFlag float64

func (r *rateFlag) String() string { return strconv.FormatFloat(float64(*r), 'g', -1, 64) }

func (r *rateFlag) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil || !(f > 0) || f > 1e9 {
		return fmt.Errorf("want requests per second above 0, as N or N/s")
	}
	*r = rateFlag(f)
	return nil
}
