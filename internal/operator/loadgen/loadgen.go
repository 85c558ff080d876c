// Package loadgen loads a rate-limit service with generated requests and
// reports its throughput, latency and decisions: the engine of
// `ratelimitd bench`.
//
// # Loops
//
// A closed loop (Config.Rate 0) runs Config.Callers callers, each sending a
// request and waiting for its answer before sending the next: it measures
// the most the server answers at that concurrency, and each latency from
// the instant its request was sent.
//
// An open loop (Config.Rate > 0) sends requests on a fixed schedule, the
// i-th due i/Rate seconds after the start, whatever the answers (at most
// Config.MaxInFlight in flight; a request due while that many are waiting
// is sent as soon as one returns). Its latencies are measured from the
// instant each request was due, not from when it could be sent, so a
// server that stalls shows its queue in the percentiles instead of hiding
// it by slowing the sender down ("coordinated omission").
//
// # Window
//
// Both loops run Config.Warmup and then Config.Duration (or until
// Config.MaxRequests have been sent in it). Only requests sent
// (closed) or due (open) within the duration are counted; every one of
// them is counted once, when its answer arrives, as admitted, denied, over
// capacity or an error (see Outcome). An open loop accounts for every
// request due in the window, however late: one still unsent Config.Timeout
// after it was due fails as DeadlineExceeded. A run interrupted by its
// context stops sending at once and reports what it measured until then.
//
// # Targets
//
// Run refuses a target that is not loopback (see CheckLoopback) unless
// Config.AllowRemote is set: it never loads a machine the user did not
// name.
package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Defaults of Config's zero fields.
const (
	DefaultCallers     = 16
	DefaultConns       = 2
	DefaultMaxInFlight = 1000
	DefaultDuration    = 10 * time.Second
	DefaultTimeout     = time.Second
)

// Config is one run.
type Config struct {
	// Target is the server's HOST:PORT.
	Target string
	// AllowRemote permits a target that is not loopback.
	AllowRemote bool
	// API is the service called (default APIv1).
	API API
	// Workload is what is sent; required.
	Workload *Workload
	// Seed determines the values drawn: the same seed draws the same
	// sequence for each caller (closed loop) or for the schedule (open).
	Seed uint64

	// Callers is the closed loop's concurrency (default DefaultCallers).
	Callers int
	// Rate, when above 0, runs an open loop of Rate requests per second.
	Rate float64
	// MaxInFlight bounds an open loop's requests awaiting answers (default
	// DefaultMaxInFlight).
	MaxInFlight int
	// Conns is the number of HTTP/2 connections the calls are spread over,
	// round robin (default DefaultConns).
	Conns int
	// Duration is the measured window (default DefaultDuration); Warmup
	// runs before it, its requests sent but not counted.
	Duration, Warmup time.Duration
	// MaxRequests, when above 0, ends the run once that many requests of
	// the measured window have been sent (and answered), if Duration has
	// not ended it before.
	MaxRequests int64
	// Timeout bounds each request (default DefaultTimeout), counted from
	// its send (closed loop) or from when it was due (open loop, so that a
	// request that waited that long to be sent fails at once): a request
	// past it counts as a DeadlineExceeded error. It also bounds how long
	// a run waits for its last answers.
	Timeout time.Duration

	// TLS, when Enabled, connects with TLS.
	TLS TLS

	// PIDs are the server's processes on this machine (the daemon, and its
	// Redis, say): the CPU and memory of each are reported (Report.Servers).
	PIDs []int
	// Progress, when not nil, receives a line a second while the run goes.
	Progress io.Writer
}

// TLS is how to connect with TLS: the server's certificate is verified
// against CA (the system's roots when empty) for ServerName (the target's
// host when empty); Cert and Key, when set, are the client certificate
// presented for mutual TLS.
type TLS struct {
	Enabled    bool
	CA         string
	Cert, Key  string
	ServerName string
}

func (t TLS) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("tls: CA: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: CA %s: no PEM certificate in it", t.CA)
		}
	}
	if (t.Cert == "") != (t.Key == "") {
		return nil, errors.New("tls: a client certificate and its key go together")
	}
	if t.Cert != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate %s with key %s: %w", t.Cert, t.Key, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func (c *Config) setDefaults() error {
	if c.API == "" {
		c.API = APIv1
	}
	if c.Callers == 0 {
		c.Callers = DefaultCallers
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Conns == 0 {
		c.Conns = DefaultConns
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch {
	case c.Workload == nil:
		return errors.New("no workload")
	case c.Callers < 0 || c.Conns < 0 || c.MaxInFlight < 0:
		return errors.New("callers, connections and in-flight bound must be at least 1")
	case c.MaxRequests < 0:
		return errors.New("request count must not be negative")
	case c.Rate < 0:
		return errors.New("rate must not be negative")
	case c.Duration < 0 || c.Warmup < 0 || c.Timeout < 0:
		return errors.New("duration, warmup and timeout must not be negative")
	}
	if _, err := ParseAPI(string(c.API)); err != nil {
		return err
	}
	return c.Workload.Validate()
}

// Run loads cfg.Target as cfg says and reports what it measured. It
// returns an error, having sent nothing, when the configuration is invalid,
// the target is refused (not loopback without AllowRemote) or cannot be
// connected to; failures of single calls are counted in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if !cfg.AllowRemote {
		if err := CheckLoopback(ctx, cfg.Target, nil); err != nil {
			return nil, err
		}
	}
	procs, err := watchProcs(cfg.PIDs)
	if err != nil {
		return nil, err
	}
	conns, err := dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	r := &runner{cfg: cfg, conns: conns, call: cfg.API.caller(), rec: newRecorder(16), procs: procs}
	return r.run(ctx)
}

// dial opens cfg.Conns connections and waits until each is ready.
func dial(ctx context.Context, cfg Config) ([]*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if cfg.TLS.Enabled {
		tc, err := cfg.TLS.config()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conns := make([]*grpc.ClientConn, 0, cfg.Conns)
	fail := func(err error) ([]*grpc.ClientConn, error) {
		for _, c := range conns {
			c.Close()
		}
		return nil, err
	}
	for range cfg.Conns {
		// passthrough: the target is dialled as given, each ClientConn its
		// own HTTP/2 connection.
		c, err := grpc.NewClient("passthrough:///"+cfg.Target, grpc.WithTransportCredentials(creds))
		if err != nil {
			return fail(fmt.Errorf("target %s: %w", cfg.Target, err))
		}
		conns = append(conns, c)
		c.Connect()
		for s := c.GetState(); s != connectivity.Ready; s = c.GetState() {
			if s == connectivity.TransientFailure {
				// A call that does not wait for readiness says why; any
				// answer but Unavailable (Unimplemented, say) came from a
				// server over a working connection.
				_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
				if status.Code(err) == codes.Unavailable || ctx.Err() != nil {
					return fail(fmt.Errorf("cannot connect to %s: %w", cfg.Target, err))
				}
				continue
			}
			if !c.WaitForStateChange(ctx, s) {
				return fail(fmt.Errorf("cannot connect to %s: %w (connection %v)", cfg.Target, ctx.Err(), s))
			}
		}
	}
	return conns, nil
}

type runner struct {
	cfg   Config
	conns []*grpc.ClientConn
	call  caller
	rec   *recorder
	procs *procWatch

	start, measureStart, end time.Time
	sent                     atomic.Int64 // answered, warmup included
	tickets                  atomic.Int64 // measured requests begun
	late                     atomic.Int64
	wg                       sync.WaitGroup
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	r.start = time.Now()
	r.measureStart = r.start.Add(r.cfg.Warmup)
	r.end = r.measureStart.Add(r.cfg.Duration)
	loopsDone := r.startLoops(ctx)
	beforeSelf := r.watch(ctx, loopsDone)
	<-loopsDone
	return r.finish(time.Now(), beforeSelf)
}

// startLoops starts the open or the closed loop, and returns a channel
// closed once it has stopped and every request it sent has its answer (or
// its deadline). The loops stop by themselves at the window's end (an
// open loop once it has sent every request due in it), or when ctx is
// done.
func (r *runner) startLoops(ctx context.Context) <-chan struct{} {
	var schedule sync.WaitGroup
	schedule.Add(1)
	if r.cfg.Rate > 0 {
		go func() { defer schedule.Done(); r.open(ctx) }()
	} else {
		go func() { defer schedule.Done(); r.closed(ctx) }()
	}
	loopsDone := make(chan struct{})
	go func() {
		schedule.Wait()
		r.wg.Wait()
		close(loopsDone)
	}()
	return loopsDone
}

// watch samples the processes at the window's start and reports progress
// once a second until the window ends, the loops are done (MaxRequests
// sent and answered) or ctx is done; it returns this process's CPU time
// at the window's start.
func (r *runner) watch(ctx context.Context, loopsDone <-chan struct{}) (beforeSelf time.Duration) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	startTimer := time.NewTimer(r.cfg.Warmup)
	defer startTimer.Stop()
	endTimer := time.NewTimer(r.cfg.Warmup + r.cfg.Duration)
	defer endTimer.Stop()
	var lastSent int64
	windowStarted := false
	startWindow := func() {
		windowStarted = true
		beforeSelf = selfCPU()
		r.procs.start()
	}
wait:
	for {
		select {
		case <-startTimer.C:
			startWindow()
		case <-tick.C:
			r.procs.sample()
			n := r.sent.Load()
			r.progress(n - lastSent)
			lastSent = n
		case <-loopsDone:
			break wait
		case <-endTimer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	if !windowStarted && !time.Now().Before(r.measureStart) {
		startWindow()
	}
	return beforeSelf
}

// finish reports the window, which ends at r.end or earlier, when the
// loops finished sooner; beforeSelf is this process's CPU time at its
// start.
func (r *runner) finish(finished time.Time, beforeSelf time.Duration) (*Report, error) {
	stopped := finished
	if stopped.After(r.end) {
		stopped = r.end
	}
	elapsed := max(0, stopped.Sub(r.measureStart))
	rep := r.report(elapsed)
	var err error
	if rep.Requests > 0 {
		cpu := selfCPU() - beforeSelf
		rep.Client.CPUSeconds = cpu.Seconds()
		rep.Client.CPUPerRequestUS = float64(cpu.Nanoseconds()) / 1e3 / float64(rep.Requests)
	}
	if rep.Servers, err = r.procs.finish(rep.Requests, finished.Sub(r.measureStart)); err != nil {
		return nil, err
	}
	return rep, nil
}

// measured reports whether a request sent (closed) or due (open) at t is
// counted.
func (r *runner) measured(t time.Time) bool { return !t.Before(r.measureStart) }

// ticket reports whether another measured request may be sent (always,
// without MaxRequests).
func (r *runner) ticket() bool {
	return r.cfg.MaxRequests <= 0 || r.tickets.Add(1) <= r.cfg.MaxRequests
}

// send calls the target with req and records the answer when counted:
// latency from since, which is the send instant (closed) or the due
// instant (open).
func (r *runner) send(i int, req request, since time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), since.Add(r.cfg.Timeout))
	o, err := r.call(ctx, r.conns[i%len(r.conns)], req)
	cancel()
	d := time.Since(since)
	r.sent.Add(1)
	if r.measured(since) {
		r.rec.record(i, d, o, err)
	}
}

// closed runs the closed loop until ctx is done or the window ends.
func (r *runner) closed(ctx context.Context) {
	for i := range r.cfg.Callers {
		s := r.cfg.Workload.newSampler(r.cfg.Seed, uint64(i))
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for ctx.Err() == nil {
				req := s.next()
				t := time.Now()
				if !t.Before(r.end) || r.measured(t) && !r.ticket() {
					return
				}
				r.send(i, req, t)
			}
		}()
	}
}

// open runs the open loop's schedule until ctx is done or the window
// ends.
func (r *runner) open(ctx context.Context) {
	s := r.cfg.Workload.newSampler(r.cfg.Seed, 0)
	slots := make(chan struct{}, r.cfg.MaxInFlight)
	interval := float64(time.Second) / r.cfg.Rate
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := 0; ; i++ {
		due := r.start.Add(time.Duration(float64(i) * interval))
		// The schedule ends at the window's end, or at the slot after the
		// last request allowed: it is waited for, so that the window
		// lasts as long as the schedule says.
		last := !due.Before(r.end) || r.measured(due) && !r.ticket()
		if due.After(r.end) {
			due = r.end
		}
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		if last {
			return
		}
		req := s.next()
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if time.Since(due) > time.Millisecond && r.measured(due) {
			r.late.Add(1)
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.send(i, req, due)
			<-slots
		}()
	}
}

// progress writes one line about the last second.
func (r *runner) progress(lastSecond int64) {
	if r.cfg.Progress == nil {
		return
	}
	now := time.Now()
	// Ticks come every second from the start; one within half a second of
	// the window's start still belongs to the warmup.
	if now.Before(r.measureStart.Add(time.Second / 2)) {
		fmt.Fprintf(r.cfg.Progress, "bench: warmup %s/%s  %d/s\n", now.Sub(r.start).Round(time.Second), r.cfg.Warmup, lastSecond)
		return
	}
	var c [numOutcomes]int64
	var n int64
	for i := range c {
		c[i] = r.rec.counts[i].Load()
		n += c[i]
	}
	pct := func(k int64) float64 {
		if n == 0 {
			return 0
		}
		return 100 * float64(k) / float64(n)
	}
	fmt.Fprintf(r.cfg.Progress, "bench: %s/%s  %d/s  %d requests  admitted %.1f%%  denied %.1f%%  over capacity %.1f%%  errors %d\n",
		now.Sub(r.measureStart).Round(time.Second), r.cfg.Duration, lastSecond, n, pct(c[Admitted]), pct(c[Denied]), pct(c[OverCapacity]), c[Failed])
}

func (r *runner) report(elapsed time.Duration) *Report {
	h, longest, errs := r.rec.merged()
	rep := &Report{
		Target:    r.cfg.Target,
		API:       r.cfg.API,
		Mode:      "closed",
		Conns:     r.cfg.Conns,
		Seed:      r.cfg.Seed,
		Workload:  []string{"domain=" + r.cfg.Workload.Domain},
		WarmupS:   r.cfg.Warmup.Seconds(),
		ElapsedS:  elapsed.Seconds(),
		Precision: fmt.Sprintf("latency percentiles to %d significant digits, 1µs to %s; server CPU in 10ms ticks", latencySigFigs, maxLatency),
	}
	if r.cfg.Workload.Hits != 0 {
		rep.Workload[0] += fmt.Sprintf(" hits=%d", r.cfg.Workload.Hits)
	}
	for _, d := range r.cfg.Workload.Descriptors {
		rep.Workload = append(rep.Workload, d.String())
	}
	if r.cfg.Rate > 0 {
		rep.Mode, rep.TargetRate, rep.MaxInFlight = "open", r.cfg.Rate, r.cfg.MaxInFlight
		rep.Client.LateSends = r.late.Load()
	} else {
		rep.Callers = r.cfg.Callers
	}
	rep.Counts = Counts{
		Admitted:     r.rec.counts[Admitted].Load(),
		Denied:       r.rec.counts[Denied].Load(),
		OverCapacity: r.rec.counts[OverCapacity].Load(),
		Errors:       r.rec.counts[Failed].Load(),
	}
	rep.Requests = rep.Counts.Admitted + rep.Counts.Denied + rep.Counts.OverCapacity + rep.Counts.Errors
	if rep.Requests > 0 {
		n := float64(rep.Requests)
		rep.Ratios = Ratios{
			Admitted:     float64(rep.Counts.Admitted) / n,
			Denied:       float64(rep.Counts.Denied) / n,
			OverCapacity: float64(rep.Counts.OverCapacity) / n,
			Errors:       float64(rep.Counts.Errors) / n,
		}
		rep.LatencyUS = Latency{
			P50:  float64(h.ValueAtQuantile(50)),
			P90:  float64(h.ValueAtQuantile(90)),
			P99:  float64(h.ValueAtQuantile(99)),
			P999: float64(h.ValueAtQuantile(99.9)),
			Max:  float64(longest.Nanoseconds()) / 1e3,
			Mean: h.Mean(),
		}
	}
	if elapsed > 0 {
		rep.RequestsPerSecond = float64(rep.Requests) / elapsed.Seconds()
	}
	rep.Errors = sortedErrors(errs)
	return rep
}
