package client

import (
	"container/heap"
	"encoding/binary"
	"sync"
	"time"
)

// localDeny remembers the requests the service denied and until when, so
// that the same request is denied without a call until then.
//
// A record (request q, until u) states what the service said: q is not
// admitted before u, u being the send time plus the service's retry_after
// for q, the shortest wait after which the same request would be admitted
// if nothing else arrived. Until u nothing makes room in q's buckets sooner
// than the service counted on (other callers only use room up), so denying
// q locally agrees with what the service would answer. The one exception is
// a policy change that raises a limit: it reaches a recorded request only
// once its record expires.
//
// A record is keyed on the whole request, never on one descriptor: what
// the service decides for a descriptor depends on the rest of the request.
// The same descriptor twice is one bucket charged their summed cost, and a
// limit of one descriptor may replace another's, which is then not charged
// at all; so a descriptor denied in one request may be admitted in
// another.
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
	policy string
	index  int // in queue
}

func newLocalDeny(max int) *localDeny {
	return &localDeny{max: max, byKey: make(map[string]*denial)}
}

// check returns the wait left at now for the request of key (requestKey),
// and the policy that denied it; ok is false when it is not denied locally.
func (l *localDeny) check(now time.Time, key []byte) (wait time.Duration, policy string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.byKey[string(key)]
	if r == nil {
		return 0, "", false
	}
	if !now.Before(r.until) {
		l.remove(r)
		return 0, "", false
	}
	return r.until.Sub(now), r.policy, true
}

// remember records that the service denied the request of key, sent at
// sent, for retry (> 0), naming policy. Dating the record from the send
// time, not the receive time, keeps it from outlasting the service's own
// retry time. The newest answer replaces an older one for the same request:
// each is true, and the newest is the service's latest word.
func (l *localDeny) remember(sent time.Time, key []byte, retry time.Duration, policy string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.byKey[string(key)]; r != nil {
		r.until, r.policy = sent.Add(retry), policy
		heap.Fix(&l.queue, r.index)
		return
	}
	l.makeRoom(sent)
	r := &denial{key: string(key), until: sent.Add(retry), policy: policy}
	l.byKey[r.key] = r
	heap.Push(&l.queue, r)
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

// appendRequestKey appends the key of a request: its domain and every
// descriptor in order, each with its entries, its cost, its operation and
// its inline limit. Every string is length-prefixed and every list counted, so two
// requests share a key only when the service would see the same request.
// A descriptor without WithHits and one WithHits(1) share a key: both cost
// 1.
func appendRequestKey(b []byte, domain string, ds []Descriptor) []byte {
	b = appendString(b, domain)
	b = binary.AppendUvarint(b, uint64(len(ds)))
	for _, d := range ds {
		b = binary.AppendUvarint(b, uint64(len(d.entries)))
		for _, e := range d.entries {
			b = appendString(b, e.key)
			b = appendString(b, e.value)
		}
		b = binary.AppendUvarint(b, uint64(d.cost()))
		b = binary.AppendUvarint(b, uint64(d.op))
		b = binary.AppendUvarint(b, uint64(d.over))
		l := d.limit
		if l == nil {
			b = append(b, 0)
			continue
		}
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
