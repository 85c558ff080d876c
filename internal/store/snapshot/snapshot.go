// Package snapshot is the file format in which the memory store keeps its
// buckets across restarts, and its crash-safe writer and checking reader.
//
// # Format, version 4
//
// All integers are little-endian.
//
//	offset  size  field
//	0       8     magic: 0x89 'R' 'L' 'S' 'N' 'A' 'P' '\n'
//	8       4     version: 4
//	12      4     flags: 0 (a reader refuses any other value)
//	16      8     clock: the decision clock's reading when the snapshot was
//	              taken, int64 nanoseconds since the Unix epoch
//	24      8     wall: the wall clock's reading at the same moment, likewise
//	32      16    key seed: the secret that keyed the digests the store keeps
//	              long keys as (the SipHash-2-4 key of internal/store/memory)
//	48      16    zero (a reader refuses any other value)
//	64      ...   records, back to back, each:
//	                uvarint  key length (at most MaxKeyBytes)
//	                bytes    the bucket's key as the store keeps it (a long
//	                         key may be kept as its digest)
//	                uvarint  domain length (at most MaxKeyBytes)
//	                bytes    the bucket's domain (store.Charge.Domain)
//	                24       the bucket's state (algorithms.State.AppendBinary)
//	end-24  8     count: the number of records
//	end-16  8     body length: the records' length in bytes
//	end-8   4     CRC-32C (Castagnoli) of every byte before it
//	end-4   4     end mark: 'E' 'N' 'D' '\n'
//
// The magic's first byte is not ASCII and its last is a newline, so a file
// mangled as text is refused as foreign. The version is read before
// anything else after the magic: a later version may change everything
// after it, and a reader refuses versions it does not know (ErrVersion)
// rather than misread them. A record's state is meaningful on the clock of
// the header's clock field; Header.Lag says how to carry it to another.
//
// Version 3 is laid out as version 4. Its records are of a store whose
// bucket keys named a limit by its whole arithmetic (requests and burst
// included) and whose bucket states did not record their rate: a reader
// converts them (internal/engine's Engine.Adopt, for the memory store's
// Restore), which is why the version changed.
//
// Version 2 is laid out as version 3, but its records have no domain (the key's
// length, the key, the state). Version 1 is laid out as version 2, but its
// 32 bytes at offset 32 are the seed of another digest (the first 16 bytes
// of SHA-256 of the seed and the key), which no store computes any more:
// its records of digests can match no key. Read reads files of versions 1
// to 3, with their Header.Version (for version 1 a zero KeySeed, and for
// versions 1 and 2 each Bucket's Domain empty), so that a reader can keep
// their records; Create writes version 4 only.
//
// # Crash safety
//
// Create writes to PATH.tmp in the same directory, a file it creates
// itself with mode 0600 (never one already there, nor through a symlink);
// Commit writes the trailer, fsyncs the file, renames it over PATH and
// fsyncs the directory.
// A crash at any point leaves PATH either as the previous snapshot or as
// the new one, whole. A file that is torn or truncated anyway (a disk or
// filesystem that does not keep its promises, a copy cut short) lacks its
// end mark or disagrees with its body length, and is refused as
// ErrTruncated; one whose bytes changed fails its checksum, ErrCorrupt.
// Read never returns part of a file: it is all of it, checked, or an error.
package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// Version is the format version this package writes, and the latest it
// reads.
const Version = 4

// OldestVersion is the oldest format version this package reads.
const OldestVersion = 1

// MaxKeyBytes bounds a record's key, and its domain. The engine's keys
// are far shorter (their parts are bounded by the request bounds); a
// longer length in a file is corruption.
const MaxKeyBytes = 1 << 20

var (
	magic   = [8]byte{0x89, 'R', 'L', 'S', 'N', 'A', 'P', '\n'}
	endMark = [4]byte{'E', 'N', 'D', '\n'}
	crcTab  = crc32.MakeTable(crc32.Castagnoli)
)

const (
	headerSize  = 64
	trailerSize = 24
)

// Header is what a snapshot says about when it was taken.
type Header struct {
	// Clock is the decision clock's reading when the snapshot was taken
	// (nanoseconds since the Unix epoch): the clock the states' times are
	// on.
	Clock int64
	// Wall is the wall clock's reading (time.Now) at the same moment.
	Wall int64
	// KeySeed is the secret with which the store keyed the digests it
	// keeps long keys as: a record's key may be such a digest, which only
	// a store using the same seed can match. It makes the file as
	// sensitive as the seed (the writer creates it with mode 0600). Zero
	// in a version 1 file, whose digests were keyed otherwise.
	KeySeed [16]byte
	// Version is the format version of a snapshot read (Version or an
	// older one). Create ignores it: it writes Version.
	Version int
}

// Lag returns how far behind the clock that wrote the snapshot ran, as
// seen by a clock that reads clockNow while the wall clock reads wallNow:
// (clockNow - wallNow) - (h.Clock - h.Wall). A state from the snapshot
// decides on the reading clock as it did on the writing one once moved by
// Lag (algorithms.State.Later).
//
// The wall clock is the only time two processes share, so the real time
// between writing and reading is taken as wallNow - h.Wall. The decision
// clock (internal/core/clock.Monotonic) reads the wall clock when the process
// starts and runs on the monotonic clock after: the two agree to within
// microseconds unless the wall clock was stepped while the writing process
// ran, and then Lag is that step.
func (h Header) Lag(clockNow, wallNow int64) int64 {
	return (clockNow - wallNow) - (h.Clock - h.Wall)
}

// Kind is why a file was refused.
type Kind int

const (
	// Foreign: the file is not a snapshot (no magic).
	Foreign Kind = iota + 1
	// WrongVersion: a snapshot of a format version this build does not read.
	WrongVersion
	// Truncated: the file ends before its end (torn or cut short).
	Truncated
	// Corrupt: the checksum or the structure is wrong.
	Corrupt
)

// String returns "foreign", "version", "truncated" or "corrupt": the
// reason label of the load-outcome metric.
func (k Kind) String() string {
	switch k {
	case Foreign:
		return "foreign"
	case WrongVersion:
		return "version"
	case Truncated:
		return "truncated"
	case Corrupt:
		return "corrupt"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is a refused file. Is matches the sentinel of its Kind
// (ErrForeign, ErrVersion, ErrTruncated, ErrCorrupt).
type Error struct {
	Kind   Kind
	Detail string
}

func (e *Error) Error() string { return "snapshot " + e.Kind.String() + ": " + e.Detail }

// Is reports whether target is the sentinel of e's Kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Detail == "" && t.Kind == e.Kind
}

// The sentinels of each Kind, for errors.Is.
var (
	ErrForeign   error = &Error{Kind: Foreign}
	ErrVersion   error = &Error{Kind: WrongVersion}
	ErrTruncated error = &Error{Kind: Truncated}
	ErrCorrupt   error = &Error{Kind: Corrupt}
)

func refuse(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Detail: fmt.Sprintf(format, args...)}
}

// KindOf returns the Kind of a refused file's error, or 0 when err is not
// a refusal (an I/O error, or nil).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// Writer writes one snapshot. It is not safe for concurrent use.
type Writer struct {
	path, tmp string
	f         *os.File
	bw        *bufio.Writer
	crc       uint32
	count     uint64
	body      uint64
	rec       []byte
	err       error
	done      bool // committed: the temporary file is the snapshot now
}

// Create starts a snapshot that Commit will put at path, writing its
// header now to path + ".tmp": a new file of mode 0600 that Create makes
// itself, after removing whatever had that name (a file left by a crash,
// or a symlink, which is removed, never followed: the file is created with
// O_EXCL, so nothing already there is ever written through). Nothing
// happens to path itself until Commit. Only one Writer may write a given
// path at a time.
func Create(path string, h Header) (*Writer, error) {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	w := &Writer{path: path, tmp: tmp, f: f, bw: bufio.NewWriterSize(f, 1<<20)}
	hdr := make([]byte, 0, headerSize)
	hdr = append(hdr, magic[:]...)
	hdr = binary.LittleEndian.AppendUint32(hdr, Version)
	hdr = binary.LittleEndian.AppendUint32(hdr, 0)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(h.Clock))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(h.Wall))
	hdr = append(hdr, h.KeySeed[:]...)
	hdr = append(hdr, make([]byte, 16)...)
	w.write(hdr)
	if w.err != nil {
		w.Abort()
		return nil, w.err
	}
	return w, nil
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	w.crc = crc32.Update(w.crc, crcTab, b)
	_, w.err = w.bw.Write(b)
}

// Add appends one bucket: its key, its domain and its state. Keys and
// domains longer than MaxKeyBytes are refused.
func (w *Writer) Add(key []byte, domain string, st algorithms.State) error {
	return addKey(w, key, domain, st)
}

// AddString is Add for a key held as a string.
func (w *Writer) AddString(key, domain string, st algorithms.State) error {
	return addKey(w, key, domain, st)
}

func addKey[K []byte | string](w *Writer, key K, domain string, st algorithms.State) error {
	if len(key) > MaxKeyBytes || len(domain) > MaxKeyBytes {
		return fmt.Errorf("snapshot: a key of %d bytes or a domain of %d (at most %d)", len(key), len(domain), MaxKeyBytes)
	}
	r := binary.AppendUvarint(w.rec[:0], uint64(len(key)))
	r = append(r, key...)
	r = binary.AppendUvarint(r, uint64(len(domain)))
	r = append(r, domain...)
	r, _ = st.AppendBinary(r)
	w.rec = r
	w.write(r)
	w.count++
	w.body += uint64(len(r))
	return w.err
}

// Len returns the number of buckets added so far.
func (w *Writer) Len() int { return int(w.count) }

// Commit finishes the snapshot: it writes the trailer, fsyncs the
// temporary file, renames it to the path given to Create and fsyncs the
// directory. It returns the file's size. On error the temporary file is
// removed and the previous file at path, if any, is untouched.
func (w *Writer) Commit() (size int64, err error) {
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	tr := make([]byte, 0, trailerSize)
	tr = binary.LittleEndian.AppendUint64(tr, w.count)
	tr = binary.LittleEndian.AppendUint64(tr, w.body)
	w.write(tr)
	if w.err != nil {
		return 0, w.err
	}
	tr = binary.LittleEndian.AppendUint32(tr[:0], w.crc)
	tr = append(tr, endMark[:]...)
	if _, err := w.bw.Write(tr); err != nil {
		return 0, err
	}
	if err := w.bw.Flush(); err != nil {
		return 0, err
	}
	if err := w.f.Sync(); err != nil {
		return 0, err
	}
	err = w.f.Close()
	w.f = nil
	if err != nil {
		return 0, err
	}
	if err := os.Rename(w.tmp, w.path); err != nil {
		return 0, err
	}
	w.done = true
	if err := syncDir(filepath.Dir(w.path)); err != nil {
		return 0, err
	}
	return headerSize + int64(w.body) + trailerSize, nil
}

// Abort abandons the snapshot and removes the temporary file. It is safe
// to call after Commit, and more than once.
func (w *Writer) Abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	if !w.done {
		os.Remove(w.tmp)
		w.done = true
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Snapshot is a snapshot read and checked whole.
type Snapshot struct {
	Header
	count int
	body  []byte
}

// Len returns the number of buckets in the snapshot.
func (s *Snapshot) Len() int { return s.count }

// Bucket is one record of a snapshot.
type Bucket struct {
	// Key is the bucket's key as the store keeps it.
	Key []byte
	// Domain is the bucket's domain; empty in a file of a version before
	// 3, which did not record it.
	Domain []byte
	State  algorithms.State
}

// All yields every bucket, in file order. Key and Domain are only valid
// during the yield; copy them to keep them.
func (s *Snapshot) All() iter.Seq[Bucket] {
	return func(yield func(Bucket) bool) {
		b := s.body
		for len(b) > 0 {
			var r Bucket
			r.Key, b, _ = field(b) // checked by Decode
			if s.Version >= 3 {
				r.Domain, b, _ = field(b)
			}
			_ = r.State.UnmarshalBinary(b[:algorithms.StateSize])
			b = b[algorithms.StateSize:]
			if !yield(r) {
				return
			}
		}
	}
}

// field splits a length-prefixed field off the front of b. It reports
// false when b does not start with one as the writer writes it: the length
// a uvarint in its shortest form, at most MaxKeyBytes, and that many
// bytes after it.
func field(b []byte) (f, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	var short [binary.MaxVarintLen64]byte
	if w <= 0 || w != binary.PutUvarint(short[:], n) || n > MaxKeyBytes || uint64(len(b)-w) < n {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// Read reads and checks the snapshot at path. It holds the whole file in
// memory (about 100 bytes a bucket) until the Snapshot is dropped. A missing file is an error
// satisfying errors.Is(err, fs.ErrNotExist); a refused one is an *Error
// (KindOf says why); any other error is the filesystem's.
func Read(path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Look at the magic and version before reading a possibly large
	// foreign file whole.
	var head [12]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, err
	}
	if err := checkStart(head[:n]); err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return Decode(data)
}

// checkStart checks the magic and the version in b, the file's first bytes.
func checkStart(b []byte) error {
	m := b[:min(len(b), len(magic))]
	if string(m) != string(magic[:len(m)]) {
		return refuse(Foreign, "no snapshot magic (the file starts %q)", m)
	}
	if len(b) < len(magic)+4 {
		return refuse(Truncated, "%d bytes, shorter than a header", len(b))
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v < OldestVersion || v > Version {
		return refuse(WrongVersion, "format version %d; this build reads versions %d to %d", v, OldestVersion, Version)
	}
	return nil
}

// Decode checks data as a whole snapshot file and returns it; the
// Snapshot refers to data. Read describes the errors.
func Decode(data []byte) (*Snapshot, error) {
	if err := checkStart(data[:min(len(data), 12)]); err != nil {
		return nil, err
	}
	if len(data) < headerSize+trailerSize {
		return nil, refuse(Truncated, "%d bytes, shorter than a header and a trailer", len(data))
	}
	version := int(binary.LittleEndian.Uint32(data[8:]))
	if flags := binary.LittleEndian.Uint32(data[12:]); flags != 0 {
		return nil, refuse(Corrupt, "flags %#x; version %d has none", flags, version)
	}
	end := len(data)
	if string(data[end-4:]) != string(endMark[:]) {
		return nil, refuse(Truncated, "no end mark: the file was cut short or torn (%d bytes)", len(data))
	}
	count := binary.LittleEndian.Uint64(data[end-24:])
	bodyLen := binary.LittleEndian.Uint64(data[end-16:])
	sum := binary.LittleEndian.Uint32(data[end-8:])
	if got := crc32.Checksum(data[:end-8], crcTab); got != sum {
		return nil, refuse(Corrupt, "checksum %08x, the file says %08x", got, sum)
	}
	if have := uint64(end - headerSize - trailerSize); bodyLen != have {
		return nil, refuse(Corrupt, "the trailer gives %d bytes of records, the file holds %d", bodyLen, have)
	}
	s := &Snapshot{
		Header: Header{
			Clock:   int64(binary.LittleEndian.Uint64(data[16:])),
			Wall:    int64(binary.LittleEndian.Uint64(data[24:])),
			Version: version,
		},
		body: data[headerSize : end-trailerSize],
	}
	if version >= 2 {
		if reserved := data[48:64]; string(reserved) != string(make([]byte, len(reserved))) {
			return nil, refuse(Corrupt, "header bytes 48 to 63 are %x; version %d has zeros there", reserved, version)
		}
		copy(s.KeySeed[:], data[32:48])
	}
	// Each length must be a uvarint in its shortest form, as the writer
	// writes it: one file, one reading.
	for b := s.body; len(b) > 0; s.count++ {
		var ok bool
		if _, b, ok = field(b); ok && version >= 3 {
			_, b, ok = field(b)
		}
		if !ok || len(b) < algorithms.StateSize {
			return nil, refuse(Corrupt, "record %d is malformed", s.count)
		}
		b = b[algorithms.StateSize:]
	}
	if uint64(s.count) != count {
		return nil, refuse(Corrupt, "%d records, the trailer says %d", s.count, count)
	}
	return s, nil
}

// SetAside renames a refused file at path to path + ".rejected", replacing
// an earlier one, so that it is kept for inspection and the next snapshot
// does not overwrite it. It returns the new name.
func SetAside(path string) (string, error) {
	aside := path + ".rejected"
	if err := os.Rename(path, aside); err != nil {
		return "", err
	}
	return aside, syncDir(filepath.Dir(path))
}
