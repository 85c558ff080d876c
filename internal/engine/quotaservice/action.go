package quotaservice

import (
	"context"

	"github.com/ratelimitd/ratelimitd/internal/core/quota"
)

// Kind is what an action tells a client to do with a bucket.
type Kind uint8

// The kinds of action.
const (
	// Share: enforce Assignment (a share of at least 1 request per period)
	// for its TTL.
	Share Kind = iota
	// AllowAll: admit every request, for Assignment.TTL.
	AllowAll
	// DenyAll: deny every request, for Assignment.TTL.
	DenyAll
	// Abandon: forget the bucket (a new one should it be asked again).
	Abandon
)

var kindNames = [...]string{Share: "share", AllowAll: "allow_all", DenyAll: "deny_all", Abandon: "abandon"}

// String returns the kind's name: "share", "allow_all", "deny_all" or
// "abandon" (the metrics' action label).
func (k Kind) String() string { return kindNames[k] }

// Action is an answer for one of a client's buckets.
type Action struct {
	// Bucket is the bucket as the client named it (Usage.Bucket).
	Bucket map[string]string
	Kind   Kind
	// Assignment is the share (Share), or holds the TTL only (AllowAll,
	// DenyAll).
	Assignment quota.Assignment
	// id is the bucket's name as an engine.BucketKey with no limit: an
	// action replaces the one pending for the same id.
	id string
}

// share is an assignment as an action: DenyAll for a share of 0.
func share(b clientBucket, a quota.Assignment) Action {
	if a.Share <= 0 {
		return Action{Bucket: b.name, Kind: DenyAll, Assignment: quota.Assignment{TTL: a.TTL}, id: b.id}
	}
	return Action{Bucket: b.name, Kind: Share, Assignment: a, id: b.id}
}

// send queues an action for c and counts it.
func (c *Client) send(a Action) {
	c.s.observer.Assigned(c.known, a.Kind.String())
	c.queue(a)
}

// queue adds an action to send, replacing one pending for the same bucket
// (in its place): what is pending is at most one action per bucket, and
// queueing costs the same however many are pending.
func (c *Client) queue(a Action) {
	c.mu.Lock()
	if i, ok := c.at[a.id]; ok {
		c.pending[i] = a
	} else {
		if c.at == nil {
			c.at = map[string]int{}
		}
		c.at[a.id] = len(c.pending)
		c.pending = append(c.pending, a)
	}
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// Ready receives when actions may be pending: then Take them.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Take returns the actions pending, in the order they were first queued,
// each bucket's last, and empties the queue.
func (c *Client) Take() []Action {
	c.mu.Lock()
	p := c.pending
	c.pending = nil
	clear(c.at)
	c.mu.Unlock()
	select {
	case c.sent <- struct{}{}: // for backlog
	default:
	}
	return p
}

// MaxPending is how many actions a client's reports may leave untaken
// before its next usage waits for them to be taken (a client that does not
// read its answers stops being read).
const MaxPending = 1024

// backlog waits, while c has MaxPending actions or more untaken, for its
// sender to take them; it returns ctx's error if ctx ends meanwhile.
func (c *Client) backlog(ctx context.Context) error {
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n < MaxPending {
			return nil
		}
		select {
		case <-c.sent:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
