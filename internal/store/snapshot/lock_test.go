package snapshot_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
)

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	first, err := snapshot.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	// A second lock on the same state file is refused, naming the holder.
	if _, err := snapshot.Lock(path); !errors.Is(err, snapshot.ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	} else if pid := strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), "pid "+pid) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second Lock: %q does not name the state file and pid %s", err, pid)
	}
	// Another state file in the same directory is not affected.
	other, err := snapshot.Lock(path + "2")
	if err != nil {
		t.Fatalf("Lock of another state file: %v", err)
	}
	other.Unlock()
	// Once released, it can be taken again.
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := snapshot.Lock(path)
	if err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	again.Unlock()
}

// TestLockReleasedWhenHolderDies: a process that dies holding the lock
// leaves no stale lock behind.
func TestLockReleasedWhenHolderDies(t *testing.T) {
	if os.Getenv("SNAPSHOT_LOCK_HOLDER") != "" {
		if _, err := snapshot.Lock(os.Getenv("SNAPSHOT_LOCK_HOLDER")); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("locked\n")
		select {} // hold it until killed
	}
	path := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLockReleasedWhenHolderDies$")
	cmd.Env = append(os.Environ(), "SNAPSHOT_LOCK_HOLDER="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("holder: %q, %v", buf, err)
	}
	if _, err := snapshot.Lock(path); !errors.Is(err, snapshot.ErrLocked) {
		t.Fatalf("Lock while another process holds it: %v, want ErrLocked", err)
	} else if !strings.Contains(err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("%q does not name the holder, pid %d", err, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := snapshot.Lock(path)
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	l.Unlock()
}
