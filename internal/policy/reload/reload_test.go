package reload

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/testkit/wait"
)

// recorder runs a Watcher and records, at each call, what read() returns.
type recorder struct {
	mu     sync.Mutex
	seen   []string
	checks int // checks the Watcher has made, changed or not
}

func (r *recorder) checked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checks
}

// waitForCheck polls until the Watcher has made a check after the first n.
func waitForCheck(t *testing.T, r *recorder, n int) {
	t.Helper()
	wait.For(t, "a check of the Watcher", func() bool { return r.checked() > n })
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// watch runs a Watcher on paths; each call records read(). The debounce
// is long enough that a write's truncation and its data are one change.
func watch(t *testing.T, read func() string, paths ...string) *recorder {
	t.Helper()
	w, err := New(paths, WithDebounce(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	w.checked = func() {
		r.mu.Lock()
		r.checks++
		r.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, func() {
			r.mu.Lock()
			r.seen = append(r.seen, read())
			r.mu.Unlock()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// waitFor waits until the recorder has seen want, and fails at once if it
// sees anything else.
func waitFor(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	wait.For(t, fmt.Sprintf("calls to see %q", want), func() bool {
		got := r.get()
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("calls saw %q, want %q", got, want)
		}
		return len(got) == len(want)
	})
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func reader(t *testing.T, path string) func() string {
	return func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
}

// Each test changes what is watched in several ways; a change that leaves
// the contents as they were is followed by a real one, and must not show
// up as a call of its own.
func TestFile(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path, data string)
	}{
		{"edited in place", func(t *testing.T, path, data string) { write(t, path, data) }},
		{"replaced by a rename", func(t *testing.T, path, data string) {
			tmp := path + ".tmp"
			write(t, tmp, data)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policy.yaml")
			write(t, path, "A")
			r := watch(t, reader(t, path), path)
			tt.change(t, path, "B")
			waitFor(t, r, "B")
			n := r.checked()
			tt.change(t, path, "B")                                   // the same bytes
			write(t, filepath.Join(filepath.Dir(path), "other"), "x") // beside it
			waitForCheck(t, r, n)
			waitFor(t, r, "B") // checked, and nothing called
			tt.change(t, path, "C")
			waitFor(t, r, "B", "C")
		})
	}
}

func TestDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "A")
	read := func() string {
		var s string
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name()[0] != '.' {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				s += e.Name() + "=" + string(b) + " "
			}
		}
		return s
	}
	r := watch(t, read, dir)
	write(t, filepath.Join(dir, "b.yaml"), "B")
	waitFor(t, r, "a.yaml=A b.yaml=B ")
	write(t, filepath.Join(dir, ".hidden"), "x") // not a change
	write(t, filepath.Join(dir, "a.yaml"), "A2")
	waitFor(t, r, "a.yaml=A b.yaml=B ", "a.yaml=A2 b.yaml=B ")
	os.Remove(filepath.Join(dir, "b.yaml"))
	waitFor(t, r, "a.yaml=A b.yaml=B ", "a.yaml=A2 b.yaml=B ", "a.yaml=A2 ")
}

// configMap lays out dir as a Kubernetes ConfigMap volume does: the data in
// a timestamped directory, a "..data" link to it, and a link per file
// through "..data".
type configMap struct {
	t   *testing.T
	dir string
	gen int
}

func newConfigMap(t *testing.T, data string) *configMap {
	c := &configMap{t: t, dir: t.TempDir()}
	c.swap(data)
	if err := os.Symlink(filepath.Join("..data", "policy.yaml"), filepath.Join(c.dir, "policy.yaml")); err != nil {
		t.Fatal(err)
	}
	return c
}

// swap publishes data as the kubelet does: a new timestamped directory, a
// "..data_tmp" link to it renamed over "..data", the old directory removed.
func (c *configMap) swap(data string) {
	c.gen++
	old := filepath.Join(c.dir, "..2026_01_01_00_00_0"+string(rune('0'+c.gen-1)))
	gen := filepath.Join(c.dir, "..2026_01_01_00_00_0"+string(rune('0'+c.gen)))
	if err := os.Mkdir(gen, 0o755); err != nil {
		c.t.Fatal(err)
	}
	write(c.t, filepath.Join(gen, "policy.yaml"), data)
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	os.RemoveAll(old)
}

func TestConfigMapSwap(t *testing.T) {
	for _, watched := range []string{"directory", "file"} {
		t.Run(watched, func(t *testing.T) {
			c := newConfigMap(t, "A")
			path := c.dir
			if watched == "file" {
				path = filepath.Join(c.dir, "policy.yaml")
			}
			r := watch(t, reader(t, filepath.Join(c.dir, "policy.yaml")), path)
			c.swap("B")
			waitFor(t, r, "B")
			c.swap("B") // a new generation with the same data
			c.swap("C")
			waitFor(t, r, "B", "C")
		})
	}
}

func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write(t, a, "xy")
	write(t, b, "z")
	ab := Fingerprint(a, b)
	if Fingerprint(a, b) != ab {
		t.Fatal("not deterministic")
	}
	write(t, a, "x")
	write(t, b, "yz")
	if Fingerprint(a, b) == ab {
		t.Fatal("moving a byte from one file to the next went unseen")
	}
	missing := Fingerprint(filepath.Join(dir, "none"))
	if missing == Fingerprint(filepath.Join(dir, "other")) {
		t.Fatal("two missing paths of different names hash alike")
	}
}

func TestRunEndsWithItsContext(t *testing.T) {
	w, err := New([]string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx, func() { t.Error("called") })
	if err := w.Close(); err != nil {
		t.Fatalf("Close after Run: %v", err)
	}
}
