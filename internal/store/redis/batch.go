package redis

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/store/guard"
)

// Batching. Requests whose buckets are all in one hash slot (every request
// on a standalone Redis, and with the {domain} hash tag every request on a
// cluster) are settled by the store's sender: a goroutine that takes every
// request waiting and sends them together, in one round trip (requests of
// one slot in one settle.lua call, which settles them one after the other,
// each atomic and all or nothing on its own; the calls of one node
// pipelined in one write). The more requests arrive at once, the fewer
// round trips and script calls each costs.
//
// When no batch is in flight as a request arrives, the sender sends it at
// once: batching adds no wait at low load. While batches are in flight,
// requests gather for the next one, which leaves when none is in flight or
// when the spacing has passed since the last one left (and fewer than
// maxInFlight are in flight). The spacing is overlapAfter, or the last
// batch's round trip over maxInFlight when that is longer: with a Redis
// that answers within overlapAfter, a batch leaves when the last returns,
// as with one batch at a time, and with a Redis far away (or a slow
// batch) a request waits for its batch a fraction of a round trip, not
// another request's round trip, and maxInFlight batches in flight cover
// the round trip. Under load (a last batch of gatherFrom or more) the
// sender also waits up to gatherWait for as many requests as its last
// batch carried (see sender).
const (
	maxBatch     = 128                   // requests in one batch
	maxInFlight  = 32                    // batches in flight at once, each on a connection of its own
	overlapAfter = time.Millisecond      // the shortest spacing of batches in flight at once
	gatherWait   = 50 * time.Microsecond // longest wait for a batch's expected requests
	gatherFrom   = 4                     // the smallest last batch that makes the sender wait
)

// call is one request waiting to be sent by a sender.
type call struct {
	ctx      context.Context // the caller's: a call it gave up before sending is dropped
	deadline time.Time       // when the store's timeout ends: a call waits no longer
	keys     []string
	args     []any     // appendRequest's
	slot     int       // the hash slot of its keys (0 on a standalone Redis)
	now      [2]string // settle.lua's now (Store.scriptNow)

	// Set by the sender before it closes done; the caller decodes the
	// decisions (in its own goroutine, not the sender's).
	reply settleReply
	err   error
	done  chan struct{}
}

// errClosed is the error of calls cut short by Close.
var errClosed = errors.New("redis: store closed")

// send queues c for a sender and waits until it is settled, ctx ends or
// the store closes: no later than c.deadline, which the sender keeps (it
// drops a call whose deadline has passed, and gives a batch the earliest
// deadline of its calls), so a call needs no timer of its own.
func (s *Store) send(ctx context.Context, c *call) error {
	select {
	case s.queue <- c:
	default:
		// The queue is full (Redis is slow or hangs): wait for room, but
		// not past the deadline.
		t := time.NewTimer(time.Until(c.deadline))
		defer t.Stop()
		select {
		case s.queue <- c:
		case <-t.C:
			return context.DeadlineExceeded
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errClosed
		}
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errClosed
	}
}

// sender sends batches until the store closes, each from a goroutine of
// its own, as the doc of maxInFlight's block says.
//
// It expects as many requests as its last batch carried: their callers,
// answered, are likely to send again. When that is at least gatherFrom,
// after the first request of a batch it waits up to gatherWait for the
// others of that many, so that a load of n concurrent callers settles into
// batches of n rather than splitting into smaller ones that each pay a
// round trip and a script call. Below that (low and moderate load, whose
// batches are of one to three) it never waits: there the wait would add
// latency and gather little.
func (s *Store) sender() {
	p := newPacer()
	for {
		batch := make([]*call, 0, maxBatch)
		select {
		case c := <-s.queue:
			batch = append(batch, c)
		case took := <-p.returned:
			p.back(took)
			continue
		case <-s.done:
			return
		}
		batch, ok := s.pace(p, batch)
		if !ok {
			return
		}
		batch = s.gather(p, batch)
		p.expect = len(batch)
		p.inFlight++
		p.lastSent = time.Now()
		go func(sent time.Time) {
			s.sendBatch(batch)
			p.returned <- time.Since(sent)
		}(p.lastSent)
	}
}

// pacer is the sender's state: the batches in flight, when the last was
// sent, how far apart they go, and how many requests it expects.
type pacer struct {
	gatherTimer, overlapTimer *time.Timer
	returned                  chan time.Duration // a batch in flight came back, after this long
	inFlight                  int
	lastSent                  time.Time
	spacing                   time.Duration
	expect                    int
}

func newPacer() *pacer {
	p := &pacer{
		gatherTimer:  time.NewTimer(time.Hour),
		overlapTimer: time.NewTimer(time.Hour),
		returned:     make(chan time.Duration, maxInFlight),
		spacing:      overlapAfter,
		expect:       1,
	}
	p.gatherTimer.Stop()
	p.overlapTimer.Stop()
	return p
}

// back records a batch in flight that came back after took.
func (p *pacer) back(took time.Duration) {
	p.inFlight--
	p.spacing = max(overlapAfter, took/maxInFlight)
}

// pace holds batch while batches are in flight, until it leaves the
// spacing after the last, and only when fewer than maxInFlight are;
// requests that arrive meanwhile join it. It returns false when the store
// closes.
func (s *Store) pace(p *pacer, batch []*call) ([]*call, bool) {
	for p.inFlight > 0 && (p.inFlight >= maxInFlight || time.Since(p.lastSent) < p.spacing) {
		var overlap <-chan time.Time
		if p.inFlight < maxInFlight {
			p.overlapTimer.Reset(p.spacing - time.Since(p.lastSent))
			overlap = p.overlapTimer.C
		}
		var queue chan *call
		if len(batch) < maxBatch {
			queue = s.queue
		}
		select {
		case c := <-queue:
			batch = append(batch, c)
		case took := <-p.returned:
			p.back(took)
		case <-overlap:
		case <-s.done:
			return batch, false
		}
		p.overlapTimer.Stop()
	}
	return batch, true
}

// gather adds to batch the requests queued, and waits up to gatherWait
// for those it expects (see sender).
func (s *Store) gather(p *pacer, batch []*call) []*call {
	waiting := false
	defer func() {
		if waiting {
			p.gatherTimer.Stop()
		}
	}()
	for len(batch) < maxBatch {
		select {
		case c := <-s.queue:
			batch = append(batch, c)
			continue
		default:
		}
		if len(batch) >= p.expect || p.expect < gatherFrom {
			return batch
		}
		if !waiting {
			waiting = true
			p.gatherTimer.Reset(gatherWait)
		}
		select {
		case c := <-s.queue:
			batch = append(batch, c)
		case <-p.gatherTimer.C:
			return batch
		case <-s.done:
			return batch
		}
	}
	return batch
}

// sendBatch settles batch in one round trip per node: one settle.lua call
// per slot, pipelined.
func (s *Store) sendBatch(batch []*call) {
	live, deadline := liveCalls(batch)
	if len(live) == 0 {
		return
	}
	s.metrics.batchSize.Observe(float64(len(live)))
	groups := groupCalls(live)
	seq := s.batches.Add(1)
	ctx, cancel := context.WithDeadline(s.life, deadline)
	defer cancel()
	keys := make([][]string, len(groups))
	args := make([][]any, len(groups))
	for g, calls := range groups {
		args[g] = s.settleHead(calls[0].now, false, len(calls))
		for _, c := range calls {
			keys[g] = append(keys[g], c.keys...)
			args[g] = append(args[g], c.args...)
		}
	}
	cmds := s.runScripts(ctx, keys, args)
	for g, calls := range groups {
		answer(calls, cmds[g], seq)
	}
}

// liveCalls ends the calls of batch whose caller gave up or whose deadline
// has passed, and returns the others (in batch's array) and the earliest
// of their deadlines.
func liveCalls(batch []*call) ([]*call, time.Time) {
	live := batch[:0]
	now := time.Now()
	var deadline time.Time
	for _, c := range batch {
		err := c.ctx.Err()
		if err == nil && !now.Before(c.deadline) {
			err = context.DeadlineExceeded
		}
		if err != nil {
			c.err = err
			close(c.done)
			continue
		}
		if deadline.IsZero() || c.deadline.Before(deadline) {
			deadline = c.deadline
		}
		live = append(live, c)
	}
	return live, deadline
}

// groupCalls sorts live by slot and returns its groups of one slot (and
// one now, which differs only with Config.Clock: by the millisecond with
// Config.Counters's own), each settled by one script call.
func groupCalls(live []*call) [][]*call {
	slices.SortStableFunc(live, func(a, b *call) int {
		return cmp.Or(a.slot-b.slot, cmp.Compare(a.now[0], b.now[0]), cmp.Compare(a.now[1], b.now[1]))
	})
	var groups [][]*call
	for i := 0; i < len(live); {
		j := i + 1
		for j < len(live) && live[j].slot == live[i].slot && live[j].now == live[i].now {
			j++
		}
		groups = append(groups, live[i:j])
		i = j
	}
	return groups
}

// answer gives each of calls its part of cmd's reply, or, when the script
// failed, the failure of the exchange seq, and ends it.
func answer(calls []*call, cmd *goredis.Cmd, seq uint64) {
	v, err := cmd.Result()
	var replies []settleReply
	if err == nil {
		counts := make([]int, len(calls))
		for i, c := range calls {
			counts[i] = len(c.keys)
		}
		replies, err = parseSettleReplies(v, counts)
	}
	for i, c := range calls {
		if err != nil {
			// One failure of Redis however many requests the
			// batch carried: the circuit breaker counts it once.
			c.err = &guard.SharedFailure{Err: err, Exchange: seq}
		} else {
			c.reply = replies[i]
		}
		close(c.done)
	}
}

// runScripts runs settle.lua on each keys[g], args[g] in one pipeline
// (EVALSHA, and EVAL again for those that Redis answered NOSCRIPT, which
// did not run), and returns each call's command.
func (s *Store) runScripts(ctx context.Context, keys [][]string, args [][]any) []*goredis.Cmd {
	run := func(eval bool, which []int, cmds []*goredis.Cmd) {
		pipe := s.client.Pipeline()
		for _, g := range which {
			if eval {
				cmds[g] = settleScript.Eval(ctx, pipe, keys[g], args[g]...)
			} else {
				cmds[g] = settleScript.EvalSha(ctx, pipe, keys[g], args[g]...)
			}
		}
		pipe.Exec(ctx) // each command holds its own outcome
	}
	cmds := make([]*goredis.Cmd, len(keys))
	all := make([]int, len(keys))
	for g := range all {
		all[g] = g
	}
	run(false, all, cmds)
	var noScript []int
	for g, c := range cmds {
		if goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			noScript = append(noScript, g)
		}
	}
	if len(noScript) > 0 {
		run(true, noScript, cmds)
	}
	return cmds
}
