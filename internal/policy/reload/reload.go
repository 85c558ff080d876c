// Package reload tells when what a set of files and directories hold has
// changed, however it was changed: edited in place, replaced by a rename,
// or swapped by a symbolic link as a Kubernetes ConfigMap or Secret volume
// swaps its "..data" link.
//
// A Watcher watches, with fsnotify, the parent directory of every path and
// every path that is a directory (so that a replaced or re-linked file is
// seen, not only writes to the file first opened). Events are debounced:
// a check runs once the paths have been quiet for the debounce interval
// (or at most eight intervals after the first event of a burst). A check
// compares a fingerprint of the paths' contents with the last one, and the
// Watcher's function is called only when it differs, so an event that
// changes nothing (a touch, a rewrite with the same bytes, a file beside
// the watched ones) calls nothing.
//
// The fingerprint of a file is its bytes, following symbolic links; that
// of a directory is the names and bytes of its entries whose names do not
// start with "." (following links; a subdirectory by its name only); a
// path that cannot be read counts by its error, so that its disappearance
// and return are changes too.
package reload

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is the quiet interval a Watcher waits for by default.
const DefaultDebounce = 200 * time.Millisecond

// Watcher calls a function when the contents of its paths change. Create
// it with New, then Run it.
type Watcher struct {
	paths    []string
	debounce time.Duration
	fsw      *fsnotify.Watcher
	last     [sha256.Size]byte
	close    sync.Once
	checked  func() // tests: called at every check, before any onChange
}

// Option configures a Watcher.
type Option func(*Watcher)

// WithDebounce sets the quiet interval (default DefaultDebounce); d must
// be positive.
func WithDebounce(d time.Duration) Option {
	return func(w *Watcher) {
		if d > 0 {
			w.debounce = d
		}
	}
}

// New starts watching paths and takes their fingerprint. Changes from then
// on are seen by Run, including those made before Run starts: create the
// Watcher before reading the paths, so that no change between the read and
// Run goes unseen. It fails when a path's directory cannot be watched.
func New(paths []string, opts ...Option) (*Watcher, error) {
	w := &Watcher{debounce: DefaultDebounce}
	for _, opt := range opts {
		opt(w)
	}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		w.paths = append(w.paths, abs)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w.fsw = fsw
	for _, dir := range w.dirs() {
		if err := fsw.Add(dir); err != nil {
			fsw.Close()
			return nil, err
		}
	}
	w.last = Fingerprint(w.paths...)
	return w, nil
}

// dirs returns the directories to watch: each path's parent, and each path
// that is a directory.
func (w *Watcher) dirs() []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, p := range w.paths {
		add(filepath.Dir(p))
		if info, err := os.Stat(p); err == nil && info.IsDir() {
			add(p)
		}
	}
	return dirs
}

// Run calls onChange, on Run's goroutine and so never concurrently with
// itself, each time a check finds the paths' contents changed since the
// last check (or since New), until ctx is done or the Watcher is closed.
// It closes the Watcher when it returns.
func (w *Watcher) Run(ctx context.Context, onChange func()) {
	defer w.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	pending := false
	var burst time.Time // when the first event of the pending burst came
	schedule := func() {
		now := time.Now()
		if !pending {
			pending, burst = true, now
		}
		if now.Sub(burst) < 8*w.debounce {
			timer.Reset(w.debounce)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			schedule()
		case _, ok := <-w.fsw.Errors: // an overflow, say: look again
			if !ok {
				return
			}
			schedule()
		case <-timer.C:
			pending = false
			// A directory swapped for another (a re-linked path) is
			// watched anew; one already watched is left as it is.
			for _, dir := range w.dirs() {
				w.fsw.Add(dir)
			}
			if w.checked != nil {
				w.checked()
			}
			if fp := Fingerprint(w.paths...); fp != w.last {
				w.last = fp
				onChange()
			}
		}
	}
}

// Close stops watching. It may be called more than once, and with or
// without Run.
func (w *Watcher) Close() error {
	var err error
	w.close.Do(func() { err = w.fsw.Close() })
	return err
}

// Fingerprint returns a digest of what paths hold, as the package
// documentation defines it: equal digests mean equal contents.
func Fingerprint(paths ...string) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range paths {
		part(h, "path", p)
		info, err := os.Stat(p)
		switch {
		case err != nil:
			part(h, "error", err.Error())
		case info.IsDir():
			entries, err := os.ReadDir(p) // sorted by name
			if err != nil {
				part(h, "error", err.Error())
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".") {
					continue
				}
				part(h, "entry", e.Name())
				file(h, filepath.Join(p, e.Name()))
			}
		default:
			file(h, p)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// file adds a file's bytes, or why they cannot be read, to h.
func file(h hash.Hash, path string) {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		part(h, "dir", "")
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		part(h, "error", err.Error())
		return
	}
	part(h, "data", string(data))
}

// part adds a tagged, length-prefixed string to h, so that distinct
// sequences of parts never hash alike.
func part(h hash.Hash, tag, s string) {
	var n [binary.MaxVarintLen64]byte
	h.Write([]byte(tag))
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	h.Write([]byte(s))
}
