package memory

import (
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
)

// Written is what WriteSnapshot wrote.
type Written struct {
	// Buckets is the number of buckets in the file, Bytes its size.
	Buckets int
	Bytes   int64
	// Took is how long the whole snapshot took, the file's fsyncs included.
	Took time.Duration
	// Pause is the longest time one shard was locked for copying: the
	// longest a decision on that shard waited for the snapshot. Locked is
	// the sum over all shards, each locked once.
	Pause, Locked time.Duration
}

// WriteSnapshot writes the store's buckets to a snapshot file at path
// (internal/store/snapshot: a temporary file, fsynced, renamed over path), for
// ReadSnapshot to bring back after a restart. wallNow is the wall clock's
// reading now (time.Now().UnixNano()), recorded with the store clock's so
// that a reader can carry the states to its own clock.
//
// The file holds each bucket's stored key — the key itself, or for a long
// key its digest — and domain, and the secret seed of the digests, so that a store
// restoring it can match the digests; keep the file as private as the
// process's memory (it is created with mode 0600).
//
// Buckets are copied one shard at a time, each shard locked only while its
// buckets are copied into a buffer, never while the file is written: a
// decision waits at most one shard's copy (Written.Pause). So the file is
// not one instant's picture: a bucket copied early may be charged again
// before a later shard is copied. Buckets at rest when their shard is
// copied are left out; they are indistinguishable from absent ones.
//
// On error, the file at path is as it was.
func (s *Store) WriteSnapshot(path string, wallNow int64) (Written, error) {
	start := time.Now()
	w, err := snapshot.Create(path, snapshot.Header{Clock: s.clock.Now(), Wall: wallNow, KeySeed: s.keySeed})
	if err != nil {
		return Written{}, err
	}
	defer w.Abort()

	var out Written
	// The index's keys and the domains' names are immutable strings:
	// copying their headers is enough, and the bytes stay valid after the
	// shard moves on.
	var keys, domains []string
	var states []algorithms.State
	for i := range s.shards {
		keys, domains, states = keys[:0], domains[:0], states[:0]
		sh := &s.shards[i]
		locked := time.Now()
		sh.mu.Lock()
		now := s.clock.Now()
		for k, p := range sh.index {
			if sl := &sh.slots[p]; !sl.state.AtRest(now) {
				keys = append(keys, k)
				domains = append(domains, sl.owner.name)
				states = append(states, sl.state)
			}
		}
		sh.mu.Unlock()
		held := time.Since(locked)
		out.Pause, out.Locked = max(out.Pause, held), out.Locked+held

		for j, k := range keys {
			if err := w.AddString(k, domains[j], states[j]); err != nil {
				return Written{}, err
			}
		}
	}
	out.Buckets = w.Len()
	if out.Bytes, err = w.Commit(); err != nil {
		return Written{}, err
	}
	out.Took = time.Since(start)
	return out, nil
}

// Adopt decides what becomes of a snapshot's bucket when it is restored
// (Restore): the key and state to restore it under, and whether to restore
// it. version is the snapshot's format version (snapshot.Header.Version).
type Adopt func(key []byte, st algorithms.State, version int) ([]byte, algorithms.State, bool)

// MinLag is the least lag (snapshot.Header.Lag) for which Restore moves
// states later: NTP steps the clock only for offsets over 128ms and slews
// it otherwise, which moves the monotonic clock along with the wall clock.
const MinLag = 100 * time.Millisecond

// Restored is what Restore did with a snapshot's buckets.
type Restored struct {
	// Buckets were restored.
	Buckets int
	// AtRest buckets had come to rest by the time of loading: nothing to
	// restore.
	AtRest int
	// Dropped buckets were refused by adopt (their limits are gone, or
	// their periods changed), or were kept under a digest the store cannot
	// match: of another seed than the store's (restoring into a store that
	// already held buckets), of the digest function of a version 1 file
	// (snapshot.Header.Version), which no store computes any more, or of a
	// key of a file before version 4, whose keys were made otherwise.
	Dropped int
	// Full buckets did not fit under the store's bounds (WithMaxBuckets,
	// WithMaxBytes).
	Full int
	// Present buckets were already in the store, which kept its own state.
	Present int
	// Lag is how far behind the writing process's clock ran, as Header.Lag
	// computes it. When above MinLag, the states were moved that much later.
	// When negative (the writing clock ran ahead), the states were kept as
	// they are: stricter than the truth by -Lag rather than lenient, as a
	// clock that steps back never grants extra. Within a millisecond or so
	// of 0 unless the wall clock was stepped while the old process ran.
	Lag time.Duration
}

// Restore puts a snapshot's buckets into the store, meant for an empty
// store before it serves. wallNow is the wall clock's reading now.
//
// States are times on the decision clock, which counts from the Unix epoch
// (internal/core/clock), so a state written by one process means the same in
// the next one and the time between the two passes by itself: a bucket
// drained before a restart has refilled by exactly the downtime after it.
// Nothing is re-based unless the writing process's clock ran behind the
// wall clock by more than MinLag (a wall clock stepped forward while it
// ran: see snapshot.Header.Lag): then every state is moved later by that
// lag (algorithms.State.Later), so that the step does not hand out extra.
// A smaller lag is left alone: it is the noise of reading two clocks, or a
// step too small for NTP to make (it slews those), and moving a window's
// start off the period's multiples would make its retry_after inexact.
//
// A bucket is skipped when it is at rest at the store clock's now (it
// would be deleted at once), when adopt is not nil and refuses it (the
// engine's Adopt: its limit is gone), when the store already holds the key
// (its own state is newer), or when it does not fit under the store's
// bounds. adopt, given each bucket's key, state and the file's version,
// returns the key and state to restore it under: the engine's key and
// state formats may have changed since the file was written. It is called
// without any lock held. A bucket counts in its domain's fair share of the
// bounds; the buckets of a file of a version before 3, which did not
// record their domains, count as of the domain "", which no request has,
// until they come to rest.
//
// A bucket kept under the digest of a long key (see the package doc) can
// be matched only with the seed that made the digest: an empty store takes
// the snapshot's seed, so Restore must come before the store is used
// (while it serves nothing); a store that already holds buckets keeps its
// own, and drops the snapshot's digested buckets if the seeds differ. adopt
// is not asked about digested buckets, whose keys are gone: they are
// restored as they are, and if their limit is gone they are simply never
// charged again and are reclaimed once at rest, as after a hot reload. The
// digested buckets of a file before version 4 are dropped: they are
// digests of keys the engine no longer makes (and of a version 1 file, of
// SHA-256, which this store no longer computes), so no key would ever
// match them: their buckets start over, as after a restart without a file.
func (s *Store) Restore(snap *snapshot.Snapshot, wallNow int64, adopt Adopt) Restored {
	now := s.clock.Now()
	lag := snap.Lag(now, wallNow)
	r := Restored{Lag: time.Duration(lag)}
	ourDigests := snap.Version >= 2 // SipHash digests, keyed by snap.KeySeed
	sameSeed := ourDigests && snap.KeySeed == s.keySeed
	if ourDigests && !sameSeed && s.Len() == 0 {
		s.keySeed, sameSeed = snap.KeySeed, true
	}
	if lag <= int64(MinLag) {
		lag = 0
	}
	var buf [DigestSize]byte
	for b := range snap.All() {
		key, st := b.Key, b.State.Later(lag) // unchanged for lag 0
		if st.AtRest(now) {
			r.AtRest++
			continue
		}
		digest := len(key) == DigestSize // a verbatim key never is
		if digest && (!sameSeed || snap.Version < 4) {
			r.Dropped++
			continue
		}
		if !digest && adopt != nil {
			var ok bool
			if key, st, ok = adopt(key, st, snap.Version); !ok {
				r.Dropped++
				continue
			}
			key = s.storedKey(key, &buf) // a key adopt changed may be one to digest
		}
		sh := &s.shards[s.shardOf(key)]
		sh.mu.Lock()
		switch _, p := sh.lookup(key); {
		case p != absent:
			r.Present++
		case s.buckets.Load() >= s.maxBuckets || s.bytes.Load()+BucketBytes(len(key)) > s.maxBytes,
			!s.insert(sh, key, string(b.Domain), st, now):
			r.Full++
		default:
			r.Buckets++
		}
		sh.mu.Unlock()
	}
	return r
}
