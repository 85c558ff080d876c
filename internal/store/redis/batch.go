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
	gatherTimer := time.NewTimer(time.Hour)
	gatherTimer.Stop()
	overlapTimer := time.NewTimer(time.Hour)
	overlapTimer.Stop()
	returned := make(chan time.Duration, maxInFlight) // a batch in flight came back, after this long
	inFlight := 0
	var lastSent time.Time
	spacing := overlapAfter
	back := func(took time.Duration) {
		inFlight--
		spacing = max(overlapAfter, took/maxInFlight)
	}
	expect := 1
	for {
		batch := make([]*call, 0, maxBatch)
		select {
		case c := <-s.queue:
			batch = append(batch, c)
		case took := <-returned:
			back(took)
			continue
		case <-s.done:
			return
		}

		// While batches are in flight, this one leaves the spacing after
		// the last, and only when fewer than maxInFlight are; requests
		// that arrive meanwhile join it.
		for inFlight > 0 && (inFlight >= maxInFlight || time.Since(lastSent) < spacing) {
			var overlap <-chan time.Time
			if inFlight < maxInFlight {
				overlapTimer.Reset(spacing - time.Since(lastSent))
				overlap = overlapTimer.C
			}
			var queue chan *call
			if len(batch) < maxBatch {
				queue = s.queue
			}
			select {
			case c := <-queue:
				batch = append(batch, c)
			case took := <-returned:
				back(took)
			case <-overlap:
			case <-s.done:
				return
			}
			overlapTimer.Stop()
		}

		waiting := false
	gather:
		for len(batch) < maxBatch {
			select {
			case c := <-s.queue:
				batch = append(batch, c)
				continue
			default:
			}
			if len(batch) >= expect || expect < gatherFrom {
				break
			}
			if !waiting {
				waiting = true
				gatherTimer.Reset(gatherWait)
			}
			select {
			case c := <-s.queue:
				batch = append(batch, c)
			case <-gatherTimer.C:
				break gather
			case <-s.done:
				break gather
			}
		}
		if waiting {
			gatherTimer.Stop()
		}
		expect = len(batch)
		inFlight++
		lastSent = time.Now()
		go func(sent time.Time) {
			s.sendBatch(batch)
			returned <- time.Since(sent)
		}(lastSent)
	}
}

// sendBatch settles batch in one round trip per node: one settle.lua call
// per slot, pipelined.
func (s *Store) sendBatch(batch []*call) {
	live := batch[:0]
	now := time.Now()
	var deadline time.Time // the batch's: its calls' earliest
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
	if len(live) == 0 {
		return
	}
	s.metrics.batchSize.Observe(float64(len(live)))

	// Group by slot (and by now, which differs only with Config.Clock:
	// by the millisecond with Config.Counters).
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
		v, err := cmds[g].Result()
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
