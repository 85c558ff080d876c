package quotaservice

import "time"

// RetireAfter is how long a client may report a bucket of shares with
// nothing asked before the service retires it: it answers the report that
// reaches it with Abandon, and forgets the client's share of the bucket
// (committed until its last assignment expires, as a client that ended).
// Envoy's filter reports every bucket it has seen at every interval, used
// or not, until the server abandons it; on abandon_action it erases the
// bucket, and decides its next request by no_assignment_behavior and
// reports it at once, as a new bucket's (the Go client does the same).
const RetireAfter = time.Minute

// retire counts a report of key by c that asked asked in elapsed, and
// reports whether the bucket is now retired: then the Abandon is queued
// and the client's share released. s.mu is held.
func (c *Client) retire(key string, b clientBucket, asked uint64, elapsed time.Duration, now int64) bool {
	c.mu.Lock()
	_, known := c.buckets[key]
	retired := false
	if !known || asked > 0 || elapsed <= 0 {
		delete(c.idle, key)
	} else if c.idle[key] += elapsed; c.idle[key] >= RetireAfter {
		delete(c.idle, key)
		delete(c.buckets, key)
		retired = true
	}
	c.mu.Unlock()
	if retired {
		c.s.push(c.s.alloc.Gone(key, c.id, now))
		c.send(Action{Bucket: b.name, Kind: Abandon, id: b.id})
	}
	return retired
}
