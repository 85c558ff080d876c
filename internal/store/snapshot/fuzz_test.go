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
// (a file of an older version: nothing but what that version's writer
// would have written, which asVersion makes of what this one writes).
func FuzzDecode(f *testing.F) {
	f.Add(valid(f))
	f.Add(asVersion(f, valid(f), 1))
	f.Add(asVersion(f, valid(f), 2))
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
		for b := range s.All() {
			if err := w.Add(b.Key, string(b.Domain), b.State); err != nil {
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
		if s.Version < Version {
			again = asVersion(t, again, byte(s.Version))
			if s.Version == 1 { // its seed is not read: any 32 bytes are accepted
				copy(again[32:64], data[32:64])
				again = resum(again)
			}
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted %x, but its contents write as %x", data, again)
		}
	})
}
