package engine

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
)

// version3 returns a snapshot of version 3 holding buckets, as an earlier
// ratelimitd wrote them: keys that name limits by their config.Limit.Key,
// states that do not record their rate.
func version3(t *testing.T, buckets map[string]algorithms.State) *snapshot.Snapshot {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	w, err := snapshot.Create(path, snapshot.Header{Clock: t0, Wall: t0})
	if err != nil {
		t.Fatal(err)
	}
	for key, st := range buckets {
		b, _ := st.AppendBinary(nil)
		clear(b[20:]) // State.m, the rate, which version 3 did not record
		var old algorithms.State
		if err := old.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if err := w.AddString(key, "d", old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(data[8:], 3)
	end := len(data)
	binary.LittleEndian.PutUint32(data[end-8:], crc32.Checksum(data[:end-8], crc32.MakeTable(crc32.Castagnoli)))
	snap, err := snapshot.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestAdoptVersion3: the buckets of a state file an earlier version wrote
// come back under this version's keys, with what they held — read by the
// limit in force now, changed while the daemon was down or not; those
// whose limit is gone, or whose period changed, do not.
func TestAdoptVersion3(t *testing.T) {
	const before = `
domain: d
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	const after = `
domain: d
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 40}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 10}
`
	pBefore, err := config.Parse("before.yaml", []byte(before))
	if err != nil {
		t.Fatal(err)
	}
	// 7 used of each limit, under the keys the earlier version made.
	old := map[string]algorithms.State{}
	for _, k := range []string{"tenant", "user", "path"} {
		l := pBefore.Domain("d").Match(entries(k, "v")).Limits[0]
		st, _ := l.Rate.Decide(algorithms.State{}, t0, 7)
		old[string(AppendBucketKey(nil, "d", entries(k, "v"), nil, l.Key))] = st
	}
	inline, _ := config.NewInlineLimit("", algorithms.TokenBucket, 10, time.Second, 0)
	st, _ := inline.Rate.Decide(algorithms.State{}, t0, 7)
	old[string(AppendBucketKey(nil, "d", entries("ip", "v"), nil, inline.Key))] = st

	s := memory.New(clock.NewFake(t0))
	e := New(mustParse(t, after), s)
	r := s.Restore(version3(t, old), t0, e.Adopt)
	if r.Buckets != 3 || r.Dropped != 1 {
		t.Fatalf("Restore = %+v, want 3 buckets restored, the one whose period changed dropped", r)
	}
	zero := uint64(0)
	for key, want := range map[string]int64{"tenant": 33, "user": 3, "path": 10} {
		resp := decide(t, e, &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries(key, "v"), Hits: &zero}}})
		if got := resp.Statuses[0].Remaining; got != want {
			t.Errorf("%s: %d remaining, want %d", key, got, want)
		}
	}
	resp := decide(t, e, &Request{Domain: "d", Descriptors: []Descriptor{{
		Entries: entries("ip", "v"), Hits: &zero,
		Limit: &InlineLimit{Algorithm: algorithms.TokenBucket, Requests: 10, Period: time.Second},
	}}})
	if got := resp.Statuses[0].Remaining; got != 3 {
		t.Errorf("inline: %d remaining, want 3", got)
	}
}

func mustParse(t *testing.T, policy string) *config.Policy {
	t.Helper()
	p, err := config.Parse("test.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
