package client

import (
	"container/heap"
	"encoding/binary"
	"sync"
	"time"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// localDeny remembers the descriptors the service denied and until when, so
// that requests naming them again are denied without a call until then.
//
// A record (cost c, until u) states what the service said: a charge of c on
// this descriptor is not admitted before u. Until u nothing makes room in
// the bucket sooner than the service counted on (other callers only use
// room up), so a charge of c or more is not admitted before u either, and
// denying it locally agrees with what the service would answer. The one
// exception is a policy change that raises the limit: it reaches a
// recorded descriptor only once its record expires. A charge smaller than
// c may fit, and peeks charge nothing: both are asked.
//
// Records are bounded in number: adding one to a full set drops the
// expired ones, then the one that expires first.
type localDeny struct {
	max int

	mu    sync.Mutex
	byKey map[string]*denial
	queue denialQueue // min-heap by until
}

type denial struct {
	key    string
	until  time.Time
	cost   uint32
	policy string
	index  int // in queue
}

func newLocalDeny(max int) *localDeny {
	return &localDeny{max: max, byKey: make(map[string]*denial)}
}

// check returns the longest wait left among the request's descriptors that
// are denied locally at now, and the policy of that one; ok is false when
// none is.
func (l *localDeny) check(now time.Time, domain string, ds []Descriptor) (wait time.Duration, policy string, ok bool) {
	var buf []byte
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.byKey) == 0 {
		return 0, "", false
	}
	for _, d := range ds {
		c := d.cost()
		if c == 0 {
			continue
		}
		buf = appendKey(buf[:0], domain, d)
		r := l.byKey[string(buf)]
		if r == nil {
			continue
		}
		if !now.Before(r.until) {
			l.remove(r)
			continue
		}
		if c >= r.cost {
			if w := r.until.Sub(now); w > wait {
				wait, policy, ok = w, r.policy, true
			}
		}
	}
	return wait, policy, ok
}

// remember records the denials of resp, an answer to a request of ds sent
// at sent: each non-shadow OVER_LIMIT status with a positive retry_after.
// Dating the record from the send time, not the receive time, keeps it from
// outlasting the service's own retry time.
func (l *localDeny) remember(sent time.Time, domain string, ds []Descriptor, resp *ratelimitv1.ShouldRateLimitResponse) {
	statuses := resp.GetStatuses()
	if len(statuses) != len(ds) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, st := range statuses {
		retry := st.GetRetryAfter().AsDuration()
		c := ds[i].cost()
		if st.GetCode() != ratelimitv1.Code_CODE_OVER_LIMIT || st.GetShadow() || retry <= 0 || c == 0 {
			continue
		}
		key := string(appendKey(nil, domain, ds[i]))
		r := l.byKey[key]
		if r == nil {
			l.makeRoom(sent)
			r = &denial{key: key}
			l.byKey[key] = r
			r.until, r.cost, r.policy = sent.Add(retry), c, policyName(st, ds[i])
			heap.Push(&l.queue, r)
			continue
		}
		// The newest answer replaces the older one: each is true, and the
		// newest is the service's latest word on this bucket.
		r.until, r.cost, r.policy = sent.Add(retry), c, policyName(st, ds[i])
		heap.Fix(&l.queue, r.index)
	}
}

// makeRoom drops expired records, then the earliest to expire, until there
// is room for one more.
func (l *localDeny) makeRoom(now time.Time) {
	for len(l.queue) > 0 && (len(l.byKey) >= l.max || !now.Before(l.queue[0].until)) {
		l.remove(l.queue[0])
	}
}

func (l *localDeny) remove(r *denial) {
	heap.Remove(&l.queue, r.index)
	delete(l.byKey, r.key)
}

// len reports the number of records, expired ones included.
func (l *localDeny) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byKey)
}

// appendKey encodes the domain and the descriptor's entries and inline
// limit, each string length-prefixed so that no two descriptors share a key.
func appendKey(b []byte, domain string, d Descriptor) []byte {
	b = appendString(b, domain)
	b = binary.AppendUvarint(b, uint64(len(d.entries)))
	for _, e := range d.entries {
		b = appendString(b, e.key)
		b = appendString(b, e.value)
	}
	if l := d.limit; l != nil {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(l.Algorithm))
		b = binary.AppendUvarint(b, uint64(l.Requests))
		b = binary.AppendVarint(b, int64(l.Period))
		b = binary.AppendUvarint(b, uint64(l.Burst))
		b = appendString(b, l.Name)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// denialQueue is a min-heap of records by expiry, for container/heap.
type denialQueue []*denial

func (q denialQueue) Len() int           { return len(q) }
func (q denialQueue) Less(i, j int) bool { return q[i].until.Before(q[j].until) }
func (q denialQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *denialQueue) Push(x any) {
	r := x.(*denial)
	r.index = len(*q)
	*q = append(*q, r)
}
func (q *denialQueue) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return r
}
