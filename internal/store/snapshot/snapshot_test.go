package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// stateOf makes a State with known contents through its public encoding.
func stateOf(restAt, t int64, n, m uint32) algorithms.State {
	b := binary.LittleEndian.AppendUint64(nil, uint64(restAt))
	b = binary.LittleEndian.AppendUint64(b, uint64(t))
	b = binary.LittleEndian.AppendUint32(b, n)
	b = binary.LittleEndian.AppendUint32(b, m)
	var s algorithms.State
	if err := s.UnmarshalBinary(b); err != nil {
		panic(err)
	}
	return s
}

type bucket struct {
	key, domain string
	st          algorithms.State
}

var sample = []bucket{
	{"\x07default\x04path\x07/orders\x17token_bucket/600/1m0s/800", "default", stateOf(1_800_000_000_000_000_000, 1_799_999_999_000_000_000, 17, 0)},
	{"", "", stateOf(1, 2, 3, 4)},
	{strings.Repeat("k", 300), strings.Repeat("d", 200), stateOf(-5, 9, 1<<31, 7)},
	{"\x00\xff binary key", "shop", stateOf(42, 0, 0, 0)},
}

var sampleHeader = Header{Clock: 1_767_225_600_123_456_789, Wall: 1_767_225_600_123_000_000, KeySeed: [16]byte{1, 2, 3, 15: 0xff}, Version: Version}

func write(t testing.TB, path string, h Header, bs []bucket) int64 {
	t.Helper()
	w, err := Create(path, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if err := w.Add([]byte(b.key), b.domain, b.st); err != nil {
			t.Fatal(err)
		}
	}
	size, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return size
}

func contents(s *Snapshot) []bucket {
	var out []bucket
	for b := range s.All() {
		out = append(out, bucket{string(b.Key), string(b.Domain), b.State})
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		buckets []bucket
	}{
		{"empty", nil},
		{"one", sample[:1]},
		{"several", sample},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state")
			size := write(t, path, sampleHeader, tc.buckets)
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != size {
				t.Errorf("Commit says %d bytes, the file has %d", size, fi.Size())
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", fi.Mode().Perm())
			}
			if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the temporary file is still there: %v", err)
			}
			s, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			if s.Header != sampleHeader {
				t.Errorf("header %+v, want %+v", s.Header, sampleHeader)
			}
			if s.Len() != len(tc.buckets) {
				t.Errorf("Len() = %d, want %d", s.Len(), len(tc.buckets))
			}
			got := contents(s)
			if len(got) != len(tc.buckets) {
				t.Fatalf("read %d buckets, wrote %d", len(got), len(tc.buckets))
			}
			for i := range got {
				if got[i] != tc.buckets[i] {
					t.Errorf("bucket %d: read %+v, wrote %+v", i, got[i], tc.buckets[i])
				}
			}
		})
	}
}

// The layout documented in the package comment, byte for byte.
func TestLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	st := stateOf(0x0102030405060708, 9, 10, 11)
	var seed [16]byte
	for i := range seed {
		seed[i] = byte(100 + i)
	}
	write(t, path, Header{Clock: 5, Wall: 6, KeySeed: seed}, []bucket{{"ab", "d", st}})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	want = append(want, 0x89, 'R', 'L', 'S', 'N', 'A', 'P', '\n')
	want = append(want, 4, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, seed[:]...)
	want = append(want, make([]byte, 16)...)
	want = append(want, 2, 'a', 'b', 1, 'd')
	want, _ = st.AppendBinary(want)
	want = append(want, 1, 0, 0, 0, 0, 0, 0, 0)  // count
	want = append(want, 29, 0, 0, 0, 0, 0, 0, 0) // body length
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	want = append(want, 'E', 'N', 'D', '\n')
	if !bytes.Equal(data, want) {
		t.Errorf("file\n%x\nwant\n%x", data, want)
	}
}

// asVersion turns a file of this version into the file of version v (1
// or 2) of the same records, without their domains; version 1's header
// holds a 32-byte seed of the digest of that version.
func asVersion(t testing.TB, data []byte, v byte) []byte {
	t.Helper()
	s, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Clone(data[:headerSize])
	old[8] = v
	if v == 1 {
		for i := 32; i < 64; i++ {
			old[i] = byte(200 + i)
		}
	}
	for b := range s.All() {
		old = binary.AppendUvarint(old, uint64(len(b.Key)))
		old = append(old, b.Key...)
		old, _ = b.State.AppendBinary(old)
	}
	body := len(old) - headerSize
	old = binary.LittleEndian.AppendUint64(old, uint64(s.Len()))
	old = binary.LittleEndian.AppendUint64(old, uint64(body))
	old = binary.LittleEndian.AppendUint32(old, 0)
	return resum(append(old, "END\n"...))
}

// Files of versions 1 and 2 read, with their records and clocks, their
// Version and no domains; version 1's with no key seed: its seed keyed a
// digest no store computes any more.
func TestReadsOlderVersions(t *testing.T) {
	for _, v := range []byte{1, 2} {
		s, err := Decode(asVersion(t, valid(t), v))
		if err != nil {
			t.Fatal(err)
		}
		want := sampleHeader
		want.Version = int(v)
		if v == 1 {
			want.KeySeed = [16]byte{}
		}
		if s.Header != want {
			t.Errorf("version %d: header %+v, want %+v", v, s.Header, want)
		}
		got := contents(s)
		if len(got) != len(sample) {
			t.Fatalf("version %d: read %d buckets, wrote %d", v, len(got), len(sample))
		}
		for i := range got {
			if w := (bucket{sample[i].key, "", sample[i].st}); got[i] != w {
				t.Errorf("version %d: bucket %d: read %+v, want %+v", v, i, got[i], w)
			}
		}
	}
}

// A file of version 3 is laid out as version 4: it reads with its
// domains, and its Version says how to read its keys.
func TestReadsVersion3(t *testing.T) {
	data := valid(t)
	data[8] = 3
	s, err := Decode(resum(data))
	if err != nil {
		t.Fatal(err)
	}
	want := sampleHeader
	want.Version = 3
	if s.Header != want {
		t.Errorf("header %+v, want %+v", s.Header, want)
	}
	got := contents(s)
	if len(got) != len(sample) {
		t.Fatalf("read %d buckets, wrote %d", len(got), len(sample))
	}
	for i := range got {
		if w := (bucket{sample[i].key, sample[i].domain, sample[i].st}); got[i] != w {
			t.Errorf("bucket %d: read %+v, want %+v", i, got[i], w)
		}
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "none"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read of a missing file: %v, want fs.ErrNotExist", err)
	}
	if KindOf(err) != 0 {
		t.Errorf("a missing file is not a refusal, got kind %v", KindOf(err))
	}
}

// valid returns the bytes of a valid snapshot of sample.
func valid(t testing.TB) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	write(t, path, sampleHeader, sample)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// resum recomputes the checksum after an edit, so that the edit itself is
// what the reader sees.
func resum(data []byte) []byte {
	end := len(data)
	binary.LittleEndian.PutUint32(data[end-8:], crc32.Checksum(data[:end-8], crc32.MakeTable(crc32.Castagnoli)))
	return data
}

func TestRefused(t *testing.T) {
	good := valid(t)
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		data []byte
		want error
		says string
	}{
		{"empty file", nil, ErrTruncated, "shorter than a header"},
		{"part of the magic", good[:5], ErrTruncated, "shorter than a header"},
		{"text", []byte("user=alice 800\n"), ErrForeign, "no snapshot magic"},
		{"a PNG", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), ErrForeign, "no snapshot magic"},
		{"magic mangled as text", edit(func(b []byte) []byte { return append([]byte("\xef\xbf\xbd"), b[1:]...) }), ErrForeign, "no snapshot magic"},
		{"version 5", edit(func(b []byte) []byte { b[8] = 5; return resum(b) }), ErrVersion, "format version 5; this build reads versions 1 to 4"},
		{"version 0", edit(func(b []byte) []byte { b[8] = 0; return resum(b) }), ErrVersion, "format version 0"},
		{"flags set", edit(func(b []byte) []byte { b[12] = 1; return resum(b) }), ErrCorrupt, "flags 0x1"},
		{"a byte after the key seed set", edit(func(b []byte) []byte { b[63] = 1; return resum(b) }), ErrCorrupt, "header bytes 48 to 63"},
		{"cut after the header", good[:headerSize], ErrTruncated, "shorter than a header and a trailer"},
		{"cut in the records", good[:headerSize+40], ErrTruncated, "no end mark"},
		{"cut before the end mark", good[:len(good)-2], ErrTruncated, "no end mark"},
		{"a byte of a key flipped", edit(func(b []byte) []byte { b[headerSize+3] ^= 1; return b }), ErrCorrupt, "checksum"},
		{"a byte of a state flipped", edit(func(b []byte) []byte { b[len(b)-trailerSize-1] ^= 0x80; return b }), ErrCorrupt, "checksum"},
		{"the clock flipped", edit(func(b []byte) []byte { b[20] ^= 4; return b }), ErrCorrupt, "checksum"},
		{"the key seed flipped", edit(func(b []byte) []byte { b[40] ^= 1; return b }), ErrCorrupt, "checksum"},
		{"a record dropped, checksum redone", edit(func(b []byte) []byte {
			return resum(append(b[:headerSize], b[headerSize+1+len(sample[0].key)+1+len(sample[0].domain)+24:]...))
		}), ErrCorrupt, "the trailer gives"},
		{"count wrong, checksum redone", edit(func(b []byte) []byte { b[len(b)-24]++; return resum(b) }), ErrCorrupt, "records, the trailer says"},
		{"key length past the end, checksum redone", edit(func(b []byte) []byte { b[headerSize] = 0x7f; return resum(b) }), ErrCorrupt, "malformed"},
		{"trailing bytes", append(bytes.Clone(good), 0), ErrTruncated, "no end mark"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Read(path)
			if err == nil {
				t.Fatalf("read %d buckets from a bad file", s.Len())
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %q (kind %v), want kind %v", err, KindOf(err), KindOf(tc.want))
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// Every cut of a valid file short of its end is refused as truncated (or,
// inside the magic, as too short to be one), and every single flipped bit
// is refused.
func TestEveryCutAndFlipRefused(t *testing.T) {
	good := valid(t)
	for n := 0; n < len(good); n++ {
		if _, err := Decode(good[:n]); KindOf(err) != Truncated {
			t.Fatalf("cut at %d of %d: %v, want truncated", n, len(good), err)
		}
	}
	for i := range good {
		for bit := range 8 {
			b := bytes.Clone(good)
			b[i] ^= 1 << bit
			if _, err := Decode(b); KindOf(err) == 0 {
				t.Fatalf("bit %d of byte %d flipped: %v, want a refusal", bit, i, err)
			}
		}
	}
}

func TestCrashBeforeCommitKeepsThePreviousFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	write(t, path, sampleHeader, sample[:1])
	before, _ := os.ReadFile(path)

	// A writer that never commits: the process died mid-snapshot.
	w, err := Create(path, Header{Clock: 1, Wall: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range sample {
		if err := w.Add([]byte(b.key), b.domain, b.st); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("the snapshot changed before Commit")
	}
	if s, err := Read(path); err != nil || s.Len() != 1 {
		t.Fatalf("the previous snapshot no longer reads: %v", err)
	}
	// The next snapshot replaces the leftover temporary file.
	write(t, path, sampleHeader, sample)
	if s, err := Read(path); err != nil || s.Len() != len(sample) {
		t.Fatalf("the next snapshot: %v", err)
	}

	w, err = Create(path, sampleHeader)
	if err != nil {
		t.Fatal(err)
	}
	w.Abort()
	w.Abort()
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Abort left the temporary file: %v", err)
	}
}

func TestCommitFailsWithoutTouchingThePath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	w, err := Create(path, sampleHeader)
	if err != nil {
		t.Fatal(err)
	}
	// The target is a non-empty directory: the rename must fail.
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); err == nil {
		t.Fatal("Commit onto a non-empty directory succeeded")
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed Commit left the temporary file: %v", err)
	}
	if _, err := Create(filepath.Join(dir, "no", "such", "dir"), sampleHeader); err == nil {
		t.Error("Create in a missing directory succeeded")
	}
}

func TestKeyTooLong(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "state"), sampleHeader)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.Add(make([]byte, MaxKeyBytes+1), "d", algorithms.State{}); err == nil {
		t.Error("a key over MaxKeyBytes was added")
	}
	if err := w.AddString("k", strings.Repeat("d", MaxKeyBytes+1), algorithms.State{}); err == nil {
		t.Error("a domain over MaxKeyBytes was added")
	}
	if w.Len() != 0 {
		t.Errorf("Len() = %d after a refused key", w.Len())
	}
}

func TestSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	for round, data := range []string{"first bad file", "second bad file"} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		aside, err := SetAside(path)
		if err != nil {
			t.Fatal(err)
		}
		if aside != path+".rejected" {
			t.Errorf("set aside as %s", aside)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("round %d: the bad file is still at its path", round)
		}
		if got, _ := os.ReadFile(aside); string(got) != data {
			t.Errorf("round %d: set aside %q, want %q", round, got, data)
		}
	}
}

func TestLag(t *testing.T) {
	const wall = int64(1_767_225_600_000_000_000)
	cases := []struct {
		name              string
		h                 Header
		clockNow, wallNow int64
		want              int64
	}{
		{"both clocks agreed", Header{Clock: wall, Wall: wall}, wall + 9e9, wall + 9e9, 0},
		{"the writer's clock ran 1h behind (the wall clock was stepped forward)",
			Header{Clock: wall - int64(time.Hour), Wall: wall}, wall + 9e9, wall + 9e9, int64(time.Hour)},
		{"the writer's clock ran 2s ahead", Header{Clock: wall + 2e9, Wall: wall}, wall + 9e9, wall + 9e9, -2e9},
		{"the reader's clock runs 5s ahead of its wall clock", Header{Clock: wall, Wall: wall}, wall + 14e9, wall + 9e9, 5e9},
	}
	for _, tc := range cases {
		if got := tc.h.Lag(tc.clockNow, tc.wallNow); got != tc.want {
			t.Errorf("%s: Lag = %d, want %d", tc.name, got, tc.want)
		}
	}
}
