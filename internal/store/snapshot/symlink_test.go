//go:build unix

package snapshot_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
)

// plant puts a symlink at name pointing at a file holding "precious"
// (mode 0644), and returns a check that the file is untouched.
func plant(t *testing.T, name string) (untouched func()) {
	t.Helper()
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if b, err := os.ReadFile(target); err != nil || string(b) != "precious" {
			t.Errorf("the symlink's target now holds %q (%v), want it untouched", b, err)
		}
		if fi, err := os.Stat(target); err == nil && fi.Mode().Perm() != 0o644 {
			t.Errorf("the symlink's target has mode %v now", fi.Mode().Perm())
		}
	}
}

// TestCreateFollowsNoSymlink: a symlink planted where the snapshot's
// temporary file goes (PATH.tmp) is not written through: its target stays
// as it was, and the snapshot lands at PATH as a file of mode 0600.
func TestCreateFollowsNoSymlink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	untouched := plant(t, path+".tmp")
	w, err := snapshot.Create(path, snapshot.Header{Clock: 1, Wall: 2, KeySeed: [16]byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	untouched()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("the snapshot is %v, want a regular file of mode 0600", fi.Mode())
	}
	if snap, err := snapshot.Read(path); err != nil || snap.KeySeed != [16]byte{1} {
		t.Errorf("reading the snapshot back: %v", err)
	}
	if _, err := os.Lstat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s.tmp is left behind: %v", path, err)
	}
}

// TestLockFollowsNoSymlink: a symlink planted at the lock file's name is
// refused, not truncated through.
func TestLockFollowsNoSymlink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	untouched := plant(t, path+".lock")
	if l, err := snapshot.Lock(path); err == nil {
		l.Unlock()
		t.Error("Lock took a lock through a symlink")
	}
	untouched()
}
