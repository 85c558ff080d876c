// Command ratelimitd is the rate-limit decision daemon.
//
//	ratelimitd [flags]                 serve (embedded default policy without --config)
//	ratelimitd check-config PATH       validate a policy file or directory
//	ratelimitd simulate [flags]        replay traffic against limits (CSV, SVG)
//	ratelimitd bench --target HOST:PORT load a rate-limit service and report (see bench --help)
//	ratelimitd --version               print the build: version, commit, commit time
//
// Signals: SIGHUP reloads the policy and the authorization policy; SIGTERM and SIGINT drain and stop the
// daemon (see daemon.Daemon.Shutdown), which then exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/upstreamenv"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// memoryHeadroom is what the daemon's soft memory limit allows above
// --max-memory: the Go runtime, the gRPC transport's buffers and requests
// in flight.
const memoryHeadroom = 192 << 20

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "check-config":
			return checkConfig(args[1:], stdout, stderr)
		case "simulate":
			return simulateCmd(args[1:], stdout, stderr)
		case "bench":
			return bench(args[1:], stdout, stderr)
		}
	}
	if err := refuseSecretArgs(args); err != nil {
		fmt.Fprintf(stderr, "ratelimitd: %v\n", err)
		return 2
	}
	cfg, code, ok := serveConfig(args, stdout, stderr)
	if !ok {
		return code
	}
	return serve(cfg, stderr)
}

// serveFlags are the daemon's flags: those daemon.Config holds as they
// are parsed, in cfg, and the others, which serveFlags.config turns into
// cfg's fields.
type serveFlags struct {
	cfg       daemon.Config
	bounds    engine.Bounds
	maxMemory byteSize
	console   *bool
	surface   *surfaceFlags
	redis     *redisFlags
	xds       *xdsFlags
	logLevel  *string
	logFormat *string
	version   *bool
}

// newServeFlags returns the daemon's flag set, with its --help, and the
// flags it parses into.
func newServeFlags(stderr io.Writer) (*flag.FlagSet, *serveFlags) {
	fs := flag.NewFlagSet("ratelimitd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `ratelimitd: a rate-limit decision service (gRPC).

Usage:
  ratelimitd [flags]               serve; without --config, the embedded default policy
  ratelimitd check-config PATH     validate a policy file or directory and exit
  ratelimitd simulate [flags]      replay traffic against limits; CSV and an SVG chart (see simulate --help)
  ratelimitd bench --target H:P    load a rate-limit service, report throughput and latency (bench --help)

Flags, by topic (docs/operations.md has the manual):
`)
		printGroupedFlags(stderr, fs, flagGroups)
	}
	f := &serveFlags{bounds: engine.DefaultBounds}
	cfg := &f.cfg
	fs.StringVar(&cfg.ConfigPath, "config", "", "policy `path`: a YAML file or a directory of *.yaml (default: the embedded policy); reloaded when it changes and on SIGHUP")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", envOr("RATELIMITD_GRPC_ADDR", "127.0.0.1:8081"), "gRPC listen `address`; 0.0.0.0:8081 or :8081 for every interface ($RATELIMITD_GRPC_ADDR, when set, is the default: the container image sets :8081)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", envOr("RATELIMITD_HTTP_ADDR", "127.0.0.1:8080"), "HTTP listen `address` (/healthz, /readyz, the decision APIs as JSON: docs/http.md; and, without --admin-addr, /metrics, /policies, /console, /debug/pprof/ with --pprof); 0.0.0.0:8080 or :8080 for every interface ($RATELIMITD_HTTP_ADDR, when set, is the default: the container image sets :8080)")
	f.surface = addSurfaceFlags(fs, cfg)
	f.addMemoryFlags(fs)
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long in-flight requests may finish on SIGTERM/SIGINT")
	fs.DurationVar(&cfg.ShutdownDelay, "shutdown-delay", 0, "on SIGTERM/SIGINT, how long to go on deciding with health NOT_SERVING before refusing new calls")
	f.addObserveFlags(fs)
	addPolicyBoundFlags(fs, &cfg.PolicyBounds)
	fs.StringVar(&cfg.TLS.Cert, "tls-cert", "", "PEM certificate `file` for the gRPC port (with --tls-key: serve TLS); reloaded when it changes")
	fs.StringVar(&cfg.TLS.Key, "tls-key", "", "PEM private key `file` of --tls-cert; reloaded when it changes")
	fs.StringVar(&cfg.TLS.ClientCA, "tls-client-ca", "", "PEM CA certificates `file`: require client certificates signed by them (mutual TLS); reloaded when it changes")
	fs.StringVar(&cfg.AuthzPolicy, "authz-policy", "", "authorization policy `file` (docs/authz.md): which callers, by client certificate or bearer token, may check, charge or refund in which domains; reloaded with its token files when they change and on SIGHUP (default: none, any caller may call every domain)")
	f.addDecisionFlags(fs)
	f.redis = addRedisFlags(fs, cfg)
	f.xds = addXDSFlags(fs, cfg)
	addTracingFlags(fs, &cfg.Tracing)
	fs.BoolVar(&cfg.HealthcheckNeedsPolicy, "healthcheck-needs-policy", false, "GET /healthcheck (envoyproxy/ratelimit's probe) fails until a policy is in force, not only while the daemon starts or stops")
	f.logLevel = fs.String("log-level", "info", "least `level` logged: debug, info, warn or error")
	f.logFormat = fs.String("log-format", "text", "log `format`: text or json")
	fs.Bool("upstream-env", false, "read envoyproxy/ratelimit's environment variables (as when started as ratelimit; docs/envoy-gateway.md); flags win over them")
	f.version = fs.Bool("version", false, "print the version, commit and commit time of this build, and exit")
	return fs, f
}

// addMemoryFlags adds the flags of the memory store: its bounds, sweeps
// and state file.
func (f *serveFlags) addMemoryFlags(fs *flag.FlagSet) {
	cfg := &f.cfg
	f.maxMemory = byteSize(memory.DefaultMaxBytes)
	fs.Var(&f.maxMemory, "max-memory", "most `bytes` of bucket state held in memory, keys included (a number with KiB, MiB, GiB, or KB, MB, GB); shared fairly between domains: past it, idle buckets are reclaimed, then buckets of domains holding more than their share (the bound over the domains holding buckets) evicted, never another domain's within its share. Unless $GOMEMLIMIT is set, Go's soft memory limit is set to this plus 192MiB (see docs/operations.md)")
	fs.IntVar(&cfg.MaxBuckets, "max-buckets", memory.DefaultMaxBuckets, "most buckets held in memory, a second bound beside --max-memory, shared between domains as it is")
	fs.DurationVar(&cfg.SweepInterval, "sweep-interval", 10*time.Second, "how often buckets back at rest are reclaimed")
	fs.StringVar(&cfg.StateFile, "state-file", "", "keep the memory store's buckets across restarts in this `file`: loaded before serving, written every --snapshot-interval and on SIGTERM/SIGINT (default: off; give a path on a volume that outlives the process, one file per daemon)")
	fs.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", daemon.DefaultSnapshotInterval, "how often the buckets are written to --state-file; a crash loses at most the charges of about this long")
}

// addObserveFlags adds the flags of metrics, the console and profiles.
func (f *serveFlags) addObserveFlags(fs *flag.FlagSet) {
	cfg := &f.cfg
	fs.Float64Var(&cfg.NearLimitRatio, "near-limit-ratio", metrics.DefaultNearLimitRatio, "hits beyond this fraction of a limit's capacity count as near_limit in metrics, in (0, 1]")
	f.console = fs.Bool("console", true, "serve the web console at /console on --admin-addr, or --http-addr without it (--console=false to disable)")
	fs.Var(&cfg.ConsoleValues, "console-values", "how the console's most-denied list keeps descriptor `values`: plain, hash (a keyed hash that tells values apart without showing them) or hide (default plain)")
	fs.IntVar(&cfg.MaxDetailedSeries, "max-detailed-series", metrics.DefaultMaxDetailedSeries, "most metric series of one detailed_metric rule; the hits of further values count on its descriptor=\"_overflow_\" series")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve Go's profiles at /debug/pprof/ on --admin-addr, or --http-addr without it (never /debug/pprof/cmdline); only where operators alone reach that address")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "also serve the metrics on this listen `address` (as envoyproxy/ratelimit's PROMETHEUS_ADDR), besides --http-addr's /metrics")
	fs.StringVar(&cfg.MetricsPath, "metrics-path", "/metrics", "`path` of the metrics on --metrics-addr")
	fs.BoolVar(&cfg.UpstreamMetricNames, "upstream-metric-names", false, "also export envoyproxy/ratelimit's metric names (ratelimit_service_rate_limit_total_hits{domain,key1,key2}, ...), which its dashboards read (docs/envoy-gateway.md)")
}

// addDecisionFlags adds the flags of how requests are decided and
// answered: their bounds, shadow mode, overdraft, quotas and responses.
func (f *serveFlags) addDecisionFlags(fs *flag.FlagSet) {
	cfg, b := &f.cfg, &f.bounds
	fs.IntVar(&b.MaxDescriptors, "max-descriptors", b.MaxDescriptors, "most descriptors in one request")
	fs.IntVar(&b.MaxEntries, "max-entries", b.MaxEntries, "most entries in one descriptor")
	fs.IntVar(&b.MaxKeyBytes, "max-key-bytes", b.MaxKeyBytes, "longest domain or entry key, in bytes")
	fs.IntVar(&b.MaxValueBytes, "max-value-bytes", b.MaxValueBytes, "longest entry value, in bytes")
	fs.BoolVar(&cfg.ShadowMode, "shadow-mode", false, "global shadow mode: deny nothing; buckets are charged as shadow_mode rules' are (both APIs)")
	fs.BoolVar(&cfg.OverdraftByDefault, "overdraft-by-default", false, "make every limit whose policy does not say overdraft: (a concurrency excepted) an overdraft limit: charges are taken in full, leaving the bucket in debt (token budgets charged after the response)")
	fs.IntVar(&cfg.QuotaDaemons, "quota-daemons", 1, "how many daemons without a shared Redis serve quota (RLQS) streams for the same limits: each hands out shares of limit / N; daemons on one Redis share by demand instead (docs/quota.md)")
	fs.BoolVar(&cfg.ResponseDynamicMetadata, "response-dynamic-metadata", false, "Envoy v3 responses carry dynamic_metadata: upstream's fields (domain, descriptors, hitsAddend, the merged metadata of the descriptors that passed), each descriptor's answer, and the quota scopes with room (docs/envoy.md)")
	fs.Var(&cfg.ResponseHeaders, "response-headers", "`style` of the headers in Envoy v3 responses: off (default), legacy (RateLimit-Limit/-Remaining/-Reset, as envoyproxy/ratelimit; a bare flag means this) or draft (RateLimit-Policy and RateLimit); Retry-After with both")
}

// serveConfig parses the daemon's flags (and envoyproxy/ratelimit's
// environment, when asked for) into the daemon's configuration. When it
// returns !ok, the process exits with code: 0 after --help or --version,
// 2 after a usage error, said on stderr.
func serveConfig(args []string, stdout, stderr io.Writer) (cfg daemon.Config, code int, ok bool) {
	fs, f := newServeFlags(stderr)
	var (
		upstream    upstreamenv.Translation
		upstreamErr error
	)
	if wantsUpstreamEnv(args) {
		upstream, upstreamErr = applyUpstreamEnv(fs)
	}
	var ignoredArgs []string
	if startedAsUpstream() {
		args, ignoredArgs = upstreamArgs(fs, args)
	}
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return cfg, code, false
	}
	if *f.version {
		fmt.Fprintln(stdout, buildinfo.Read())
		return cfg, 0, false
	}
	if upstreamErr == nil {
		upstreamErr = missingPolicyDir(fs, upstream)
	}
	err := upstreamErr // reported once --help and --version are answered
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if err == nil {
		err = f.config(upstream, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd: %v\n", err)
		return cfg, 2, false
	}
	cfg = f.cfg
	for _, w := range upstream.Warnings {
		cfg.Logger.Warn("envoyproxy/ratelimit setting ignored: " + w)
	}
	if len(ignoredArgs) > 0 {
		cfg.Logger.Warn(ignoredArgsWarning(ignoredArgs))
	}
	return cfg, 0, true
}

// config sets f.cfg's fields that the flags do not set as they are parsed
// (upstream's Redis passwords the fallback of the flags', the logger
// writing to logs), and says which flag is out of range (the daemon would
// read a zero as "the default") or contradicts another (daemon.Config.Check).
// It sets Go's soft memory limit from --max-memory, for the memory store,
// unless $GOMEMLIMIT is set.
func (f *serveFlags) config(upstream upstreamenv.Translation, logs io.Writer) error {
	cfg := &f.cfg
	cfg.Bounds = f.bounds
	cfg.NoConsole = !*f.console
	if cfg.MaxDetailedSeries < 1 {
		return fmt.Errorf("--max-detailed-series %d: want at least 1", cfg.MaxDetailedSeries)
	}
	if err := checkPolicyBounds(cfg.PolicyBounds); err != nil {
		return err
	}
	if cfg.NearLimitRatio == 0 {
		return errors.New("--near-limit-ratio 0: want a number in (0, 1]")
	}
	if cfg.SnapshotInterval <= 0 {
		return fmt.Errorf("--snapshot-interval %v: want a positive duration", cfg.SnapshotInterval)
	}
	if err := f.surface.apply(cfg); err != nil {
		return err
	}
	f.redis.fallbackPassword = upstream.RedisPassword
	f.redis.fallbackSentinelPassword = upstream.RedisSentinelPassword
	if err := f.redis.apply(cfg); err != nil {
		return err
	}
	cfg.MaxMemory = int64(f.maxMemory)
	if cfg.Store == "memory" && os.Getenv("GOMEMLIMIT") == "" {
		// Go's garbage collector then collects harder as the process nears
		// the bound and the headroom above it (the transport, the runtime),
		// instead of letting the heap grow to twice what is live.
		debug.SetMemoryLimit(cfg.MaxMemory + memoryHeadroom)
	}
	if err := f.xds.apply(cfg); err != nil {
		return err
	}
	logger, err := newLogger(logs, *f.logLevel, *f.logFormat)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	return cfg.Check() // before any log line
}

// serve runs the daemon until SIGTERM or SIGINT (then drains it and
// returns 0) or until it fails (1); SIGHUP reloads its policies.
func serve(cfg daemon.Config, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	bi := buildinfo.Read()
	cfg.Logger.Info("ratelimitd starting", "version", bi.Version, "commit", bi.Commit, "commit_time", bi.Date(), "modified", bi.Modified, "go", bi.GoVersion)
	d, err := daemon.Start(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd: %v\n", err)
		return 1
	}
	for {
		select {
		case <-hup:
			d.Reload()      // logs its outcome; a bad policy leaves the old one serving
			d.ReloadAuthz() // the same for the authorization policy
		case <-ctx.Done():
			stop()
			// A second signal cuts the drain short.
			again, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			cfg.Logger.Info("shutting down; a second signal stops at once")
			d.Shutdown(again)
			cancel()
			return 0
		case err := <-d.Done():
			fmt.Fprintf(stderr, "ratelimitd: server stopped: %v\n", err)
			return 1
		}
	}
}

// addPolicyBoundFlags adds the flags that bound policy files, for serving
// and for check-config alike.
func addPolicyBoundFlags(fs *flag.FlagSet, l *config.PolicyBounds) {
	*l = config.DefaultPolicyBounds
	fs.Int64Var(&l.MaxBytes, "max-policy-bytes", l.MaxBytes, "largest policy file, and all files of a --config directory together (or the resources of one --xds-server response), in `bytes`; larger ones are rejected before they are read (or decoded)")
	fs.IntVar(&l.MaxDescriptors, "max-policy-descriptors", l.MaxDescriptors, "most descriptors of the policy (each use of a YAML alias counted, all files of a directory together; over xDS, counted before the response is decoded)")
}

// checkPolicyBounds refuses a policy bound below 1, naming its flag.
func checkPolicyBounds(l config.PolicyBounds) error {
	switch {
	case l.MaxBytes < 1:
		return fmt.Errorf("--max-policy-bytes %d: want at least 1", l.MaxBytes)
	case l.MaxDescriptors < 1:
		return fmt.Errorf("--max-policy-descriptors %d: want at least 1", l.MaxDescriptors)
	}
	return nil
}

// newLogger returns the daemon's logger, writing to w at level and above,
// as text or JSON.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// envOr returns the environment variable name's value, or def when it is
// unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func checkConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ratelimitd check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratelimitd check-config [--max-policy-bytes N] [--max-policy-descriptors N] PATH")
		fs.PrintDefaults()
	}
	var limits config.PolicyBounds
	addPolicyBoundFlags(fs, &limits)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: ratelimitd check-config [--max-policy-bytes N] [--max-policy-descriptors N] PATH")
		fmt.Fprintln(stderr, "PATH is one policy file, or a directory of them; run 'ratelimitd check-config --help' for the flags")
		return 2
	}
	if err := checkPolicyBounds(limits); err != nil {
		fmt.Fprintf(stderr, "ratelimitd check-config: %v\n", err)
		return 2
	}
	p, err := config.LoadWithin(fs.Arg(0), limits)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	for _, d := range p.Domains() {
		fmt.Fprintf(stdout, "ok: domain %q from %s\n", d.Name, d.Source)
		if !d.HasLimits() {
			fmt.Fprintf(stdout, "warning: domain %q has no rate limits: it admits every request\n", d.Name)
		}
		for _, key := range d.OverdraftRules() {
			fmt.Fprintf(stdout, "overdraft: %s takes charges in full, into debt if need be\n", key)
		}
	}
	return 0
}
