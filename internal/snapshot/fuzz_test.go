package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode: any bytes are either refused with a Kind or accepted, never a
// panic; and an accepted file is exactly what the writer makes of its
// contents, so the reader accepts nothing the writer could not have written
// (a version 1 file: nothing but what it would have written, whose seed
// and version the writer now writes as version 2's).
func FuzzDecode(f *testing.F) {
	f.Add(valid(f))
	f.Add(asVersion1(valid(f)))
	f.Add([]byte{})
	f.Add([]byte("\x89RLSNAP\n\x01\x00\x00\x00"))
	f.Add([]byte("not a snapshot"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			if KindOf(err) == 0 {
				t.Fatalf("refused without a kind: %v", err)
			}
			return
		}
		path := filepath.Join(dir, "again")
		w, err := Create(path, s.Header)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for k, st := range s.All() {
			if err := w.Add(k, st); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != s.Len() {
			t.Fatalf("All yielded %d buckets, Len is %d", n, s.Len())
		}
		if _, err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		again, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if s.Version == 1 {
			data = bytes.Clone(data)
			data[8] = Version
			clear(data[32:64])
			data = resum(data)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted %x, but its contents write as %x", data, again)
		}
	})
}
