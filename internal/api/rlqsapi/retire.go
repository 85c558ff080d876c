package rlqsapi

import (
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// RetireAfter is how long a stream may report a bucket served by quota
// with nothing asked before the server retires it: it answers the report
// that reaches it with abandon_action, and forgets the stream's share of
// the bucket (committed until its last assignment expires, as a stream
// that ended). Envoy's filter reports every bucket it has seen at every
// interval, used or not, until the server abandons it; on abandon_action
// it erases the bucket, and decides its next request by
// no_assignment_behavior and reports it at once, as a new bucket's (the
// Go client does the same).
const RetireAfter = time.Minute

// retire counts a report of key on st that asked asked in elapsed, and
// reports whether the bucket is now retired: then the abandon_action is
// queued and the stream's share released. s.mu is held.
func (s *Server) retire(st *stream, key string, id *rlqsv3.BucketId, asked uint64, elapsed time.Duration, now int64) bool {
	st.mu.Lock()
	_, known := st.buckets[key]
	retired := false
	if !known || asked > 0 || elapsed <= 0 {
		delete(st.idle, key)
	} else if st.idle[key] += elapsed; st.idle[key] >= RetireAfter {
		delete(st.idle, key)
		delete(st.buckets, key)
		retired = true
	}
	st.mu.Unlock()
	if retired {
		s.push(s.alloc.Gone(key, st.id, now))
		s.send(st, abandonAction(id))
	}
	return retired
}

func abandonAction(id *rlqsv3.BucketId) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}
