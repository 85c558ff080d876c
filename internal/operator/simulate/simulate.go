// Package simulate replays traffic against rate limits to show what each
// algorithm admits: the arithmetic of internal/core/algorithms, decided on a
// simulated clock, so a simulation answers exactly as the daemon would for
// one bucket receiving that traffic.
//
// A simulation is a Traffic (arrival times, and what each request costs)
// and one or more Lanes (a limit each); every lane sees the same arrivals,
// so lanes side by side compare algorithms on equal terms. A lane may be a
// token budget charged after the fact (Lane.Overdraft): each request is
// checked first and, admitted, charged its whole cost, so the budget can go
// into debt and stay denied until its refill pays the debt back; Bin.InDebt
// shows when. A concurrency lane counts requests in flight rather than a
// rate: each admitted request holds its cost for Traffic.Hold and then
// releases it, but for a Traffic.Unreleased fraction that never does, as
// callers that crashed, whose units only their lease frees. Time starts at
// 0 on the simulated clock, the Unix epoch, where every window boundary of
// every period falls, so a fixed window's first boundary is at exactly one
// period.
package simulate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// Pattern names a shape of traffic.
type Pattern string

const (
	// Steady sends Rate requests a second, evenly spaced.
	Steady Pattern = "steady"
	// Bursts sends Burst requests at once every Every, from time 0.
	Bursts Pattern = "bursts"
	// Boundary sends Burst requests just before the first window boundary
	// (at Period − Period/100) and Burst more exactly at it (at Period):
	// the case where a fixed window admits twice its limit within a
	// hundredth of a period.
	Boundary Pattern = "boundary"
	// Poisson sends requests at random, Rate a second on average
	// (exponential gaps drawn from Seed, so a seed always gives the same
	// traffic).
	Poisson Pattern = "poisson"
	// Recorded sends a request at each of Times.
	Recorded Pattern = "recorded"
)

// Patterns lists every pattern.
func Patterns() []Pattern { return []Pattern{Steady, Bursts, Boundary, Poisson, Recorded} }

// MaxArrivals bounds the requests of one simulation.
const MaxArrivals = 1_000_000

// Traffic describes arrivals over Duration from time 0.
type Traffic struct {
	Pattern  Pattern
	Duration time.Duration
	// Rate is requests a second, for Steady and Poisson.
	Rate float64
	// Burst is requests at once, for Bursts and Boundary.
	Burst int
	// Every is the time between bursts, for Bursts.
	Every time.Duration
	// Period places Boundary's burst: normally the period of the limits
	// compared.
	Period time.Duration
	// Seed seeds Poisson.
	Seed uint64
	// Times are the arrival times for Recorded, from 0; those outside
	// [0, Duration) are ignored.
	Times []time.Duration
	// Cost is what each request uses (tokens, for a token budget); 0
	// means 1.
	Cost int64
	// Hold is how long a request admitted by a concurrency lane holds its
	// cost in flight: it releases it (a refund, as the daemon's, of the
	// oldest units) at its arrival + Hold, before any arrival at that
	// instant is decided. 0 means never: only the lease frees the units.
	// Lanes of the other algorithms ignore it, as a refund there would
	// give quota back.
	Hold time.Duration
	// Unreleased is the fraction, from 0 to 1, of the requests a
	// concurrency lane admits that never release (with Hold > 0): the
	// k-th admitted (from 1) is one when ⌊k·Unreleased⌋ > ⌊(k−1)·Unreleased⌋,
	// so they are spread evenly and 0.25 leaves every 4th.
	Unreleased float64
}

// unreleased reports whether the k-th request (from 1) a concurrency lane
// admits never releases.
func (t Traffic) unreleased(k int) bool {
	return t.Hold == 0 || math.Floor(float64(k)*t.Unreleased) > math.Floor(float64(k-1)*t.Unreleased)
}

// cost returns what each request uses.
func (t Traffic) cost() int64 { return max(t.Cost, 1) }

// Arrivals returns the arrival times, sorted, or an error naming the field
// that is missing or out of range.
func (t Traffic) Arrivals() ([]time.Duration, error) {
	if t.Duration <= 0 {
		return nil, errors.New("duration: must be positive")
	}
	if t.Cost < 0 {
		return nil, errors.New("cost: must not be negative (0 means 1)")
	}
	if t.Hold < 0 {
		return nil, errors.New("hold: must not be negative (0: never released)")
	}
	if !(t.Unreleased >= 0 && t.Unreleased <= 1) {
		return nil, errors.New("unreleased: must be a fraction from 0 to 1")
	}
	var a arrivals
	var err error
	switch t.Pattern {
	case Steady, Poisson:
		err = t.atRate(&a)
	case Bursts:
		err = t.inBursts(&a)
	case Boundary:
		err = t.atBoundary(&a)
	case Recorded:
		err = t.recorded(&a)
	default:
		err = fmt.Errorf("pattern %q: want one of steady, bursts, boundary, poisson, recorded", t.Pattern)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// arrivals collects arrival times, at most MaxArrivals.
type arrivals []time.Duration

func (a *arrivals) add(at time.Duration) error {
	if len(*a) >= MaxArrivals {
		return fmt.Errorf("traffic: more than %d requests; shorten the duration or lower the rate", MaxArrivals)
	}
	*a = append(*a, at)
	return nil
}

// atRate adds Rate arrivals a second: evenly spaced (Steady) or at
// exponentially distributed gaps of that mean (Poisson).
func (t Traffic) atRate(a *arrivals) error {
	if !(t.Rate > 0) || math.IsInf(t.Rate, 0) {
		return errors.New("rate: must be a positive number of requests a second")
	}
	if t.Rate*t.Duration.Seconds() > MaxArrivals {
		return fmt.Errorf("traffic: rate × duration is more than %d requests", MaxArrivals)
	}
	rng := rand.New(rand.NewPCG(t.Seed, t.Seed^0x5eed))
	gap := float64(time.Second) / t.Rate
	for at := 0.0; at < float64(t.Duration); {
		if err := a.add(time.Duration(at)); err != nil {
			return err
		}
		if t.Pattern == Steady {
			at += gap
		} else {
			at += rng.ExpFloat64() * gap
		}
	}
	return nil
}

// inBursts adds Burst arrivals at once, Every apart from 0.
func (t Traffic) inBursts(a *arrivals) error {
	if t.Burst <= 0 || t.Every <= 0 {
		return errors.New("burst and every: bursts need a positive size and interval")
	}
	for at := time.Duration(0); at < t.Duration; at += t.Every {
		for range t.Burst {
			if err := a.add(at); err != nil {
				return err
			}
		}
	}
	return nil
}

// atBoundary adds Burst arrivals just before the first window boundary
// (a hundredth of Period before it) and Burst at it.
func (t Traffic) atBoundary(a *arrivals) error {
	if t.Burst <= 0 || t.Period <= 0 {
		return errors.New("burst and period: a boundary burst needs a positive size and the window period")
	}
	for _, at := range []time.Duration{t.Period - t.Period/100, t.Period} {
		for range t.Burst {
			if at < t.Duration {
				if err := a.add(at); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// recorded adds Times within [0, Duration), sorted.
func (t Traffic) recorded(a *arrivals) error {
	for _, at := range t.Times {
		if at >= 0 && at < t.Duration {
			if err := a.add(at); err != nil {
				return err
			}
		}
	}
	slices.Sort(*a)
	return nil
}

// Lane is one limit to simulate.
type Lane struct {
	// Name labels the lane (for example the algorithm or the rule).
	Name  string
	Limit algorithms.Limit
	// Capacity is the limit's capacity, for scaling the chart's remaining.
	Capacity int64
	// Overdraft: the limit takes overdraft charges, as a token budget
	// behind Envoy Gateway: each request is admitted when a check says a
	// charge of 1 would be (the budget neither spent nor in debt), and an
	// admitted request is then charged its whole cost, whatever is left.
	// Otherwise a request is admitted only when its cost fits.
	Overdraft bool
}

// NewLane returns a lane named after its algorithm, for a limit of
// requests per period (and burst, for the buckets; 0 means requests).
func NewLane(alg algorithms.Algorithm, requests int64, period time.Duration, burst int64) (Lane, error) {
	l, err := algorithms.NewLimit(alg, requests, period, burst)
	if err != nil {
		return Lane{}, fmt.Errorf("%s: %w", alg, err)
	}
	return Lane{Name: alg.String(), Limit: l, Capacity: l.Capacity()}, nil
}

// ParseAlgorithms returns the algorithms of list, their names separated
// by commas (spaces around a name ignored), in its order; an unknown name
// is an error.
func ParseAlgorithms(list string) ([]algorithms.Algorithm, error) {
	var algs []algorithms.Algorithm
	for _, name := range strings.Split(list, ",") {
		alg, err := algorithms.ParseAlgorithm(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		algs = append(algs, alg)
	}
	return algs, nil
}

// CompareLanes returns a lane for each of algs, each a limit of requests
// per period, taking overdraft charges when overdraft is set (see
// Lane.Overdraft). Burst is the capacity of the algorithms that have one
// (0: requests); a window has none of its own and ignores it.
func CompareLanes(algs []algorithms.Algorithm, requests int64, period time.Duration, burst int64, overdraft bool) ([]Lane, error) {
	lanes := make([]Lane, 0, len(algs))
	for _, alg := range algs {
		b := burst
		if alg == algorithms.FixedWindow || alg == algorithms.SlidingWindow {
			b = 0
		}
		lane, err := NewLane(alg, requests, period, b)
		if err != nil {
			return nil, err
		}
		lane.Overdraft = overdraft
		lanes = append(lanes, lane)
	}
	return lanes, nil
}

// Bin is what one lane did in one interval of the simulation.
type Bin struct {
	// Start is when the interval began; it lasts Result.BinWidth.
	Start    time.Duration
	Admitted int
	Denied   int
	// Remaining is what the bucket held at the end of the interval (before
	// anything at that instant): the cost that would have been admitted
	// then. For a concurrency lane, the limit less the units in flight.
	Remaining int64
	// MaxDelay is the longest queue delay given to a request admitted in
	// the interval (leaky_bucket_queue only).
	MaxDelay time.Duration
	// InDebt: at the end of the interval the bucket was in debt (an
	// Overdraft lane charged more than was left), so Remaining is 0 and
	// every request is denied until its refill has paid the debt back.
	InDebt bool
}

// LaneResult is one lane's simulation.
type LaneResult struct {
	Name     string
	Capacity int64
	Bins     []Bin
	Admitted int
	Denied   int
	// Released, for a concurrency lane, is how many admitted requests
	// released their units within the simulation (Traffic.Hold).
	Released int
	// MaxAdmittedIn is the most requests admitted within any interval of
	// one period (the Traffic's Period, or the limit's capacity's worth
	// otherwise): the burst a caller can get through.
	MaxAdmittedIn int
}

// Result is a whole simulation.
type Result struct {
	Arrivals int
	Duration time.Duration
	BinWidth time.Duration
	// Window is the interval MaxAdmittedIn was measured over.
	Window time.Duration
	Lanes  []LaneResult
}

// MaxLanes bounds the lanes of one simulation: its cost is the arrivals
// times the lanes.
const MaxLanes = 8

// Run decides every arrival, one request of the Traffic's cost each, in
// each lane (as Lane.Overdraft says), and sums what happened into bins of
// width binWidth (≤ 0: Duration/100).
// window is the interval for LaneResult.MaxAdmittedIn (≤ 0: none). It
// stops, returning ctx's error, when ctx ends (checked at every bin).
func Run(ctx context.Context, t Traffic, lanes []Lane, binWidth, window time.Duration) (*Result, error) {
	switch {
	case len(lanes) == 0:
		return nil, errors.New("lanes: nothing to simulate")
	case len(lanes) > MaxLanes:
		return nil, fmt.Errorf("lanes: %d; at most %d", len(lanes), MaxLanes)
	}
	arrivals, err := t.Arrivals()
	if err != nil {
		return nil, err
	}
	if binWidth <= 0 {
		binWidth = max(t.Duration/100, 1)
	}
	nbins := int((t.Duration + binWidth - 1) / binWidth)
	if nbins > 10_000 {
		return nil, fmt.Errorf("bins: %d intervals of %v; at most 10000", nbins, binWidth)
	}
	res := &Result{Arrivals: len(arrivals), Duration: t.Duration, BinWidth: binWidth, Window: window}
	for _, lane := range lanes {
		lr, err := runLane(ctx, t, lane, arrivals, nbins, binWidth, window)
		if err != nil {
			return nil, err
		}
		res.Lanes = append(res.Lanes, lr)
	}
	return res, nil
}

// runLane decides every arrival in lane, summed into nbins bins of
// binWidth, with the burst measured over window (as Run).
func runLane(ctx context.Context, t Traffic, lane Lane, arrivals []time.Duration, nbins int, binWidth, window time.Duration) (LaneResult, error) {
	lr := LaneResult{Name: lane.Name, Capacity: lane.Capacity, Bins: make([]Bin, nbins)}
	var st algorithms.State
	var admittedAt []time.Duration
	held := releases{cost: t.cost()}
	holds := lane.Limit.Algorithm() == algorithms.Concurrency
	next := 0
	for b := range lr.Bins {
		if err := ctx.Err(); err != nil {
			return lr, err
		}
		bin := &lr.Bins[b]
		bin.Start = time.Duration(b) * binWidth
		end := bin.Start + binWidth
		for ; next < len(arrivals) && arrivals[next] < end; next++ {
			at := arrivals[next]
			st = held.until(&lane.Limit, st, at, true)
			var d algorithms.Decision
			st, d = lane.decide(st, int64(at), t.cost())
			if d.Code != algorithms.Allowed {
				bin.Denied++
				continue
			}
			bin.Admitted++
			bin.MaxDelay = max(bin.MaxDelay, d.Delay)
			admittedAt = append(admittedAt, at)
			if holds && !t.unreleased(lr.Admitted+bin.Admitted) {
				held.at = append(held.at, at+t.Hold)
			}
		}
		st = held.until(&lane.Limit, st, end, false)
		_, peek := lane.Limit.Decide(st, int64(end), 0)
		bin.Remaining = peek.Remaining
		bin.InDebt = lane.Limit.InDebt(st, int64(end))
		lr.Admitted += bin.Admitted
		lr.Denied += bin.Denied
	}
	lr.Released = held.done
	lr.MaxAdmittedIn = mostWithin(admittedAt, window)
	return lr, nil
}

// releases are a concurrency lane's releases to come, in time order (every
// request holds for the same Traffic.Hold), each of cost units.
type releases struct {
	at   []time.Duration
	cost int64
	done int // releases made
}

// until makes, on st under l, the releases due before t (and at t when
// inclusive), and returns the state they leave.
func (r *releases) until(l *algorithms.Limit, st algorithms.State, t time.Duration, inclusive bool) algorithms.State {
	for len(r.at) > 0 && (r.at[0] < t || inclusive && r.at[0] == t) {
		st, _ = l.Refund(st, int64(r.at[0]), r.cost)
		r.at = r.at[1:]
		r.done++
	}
	return st
}

// decide decides one request of cost at now: for an Overdraft lane, a
// check and, admitted, an overdraft charge of cost; else a charge that
// must fit.
func (l *Lane) decide(st algorithms.State, now, cost int64) (algorithms.State, algorithms.Decision) {
	if !l.Overdraft {
		return l.Limit.Decide(st, now, cost)
	}
	if d := l.Limit.Check(st, now); d.Code != algorithms.Allowed {
		return st, d
	}
	st, _ = l.Limit.Overdraft(st, now, cost)
	return st, algorithms.Decision{Code: algorithms.Allowed}
}

// mostWithin returns the most of the sorted times that fall within any
// half-open interval of length w.
func mostWithin(times []time.Duration, w time.Duration) int {
	if w <= 0 {
		return 0
	}
	most, lo := 0, 0
	for hi := range times {
		for times[hi]-times[lo] >= w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}
