package snapshot

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrLocked is the error of Lock when another process holds the lock.
var ErrLocked = errors.New("state file in use by another process")

// FileLock is a state file's lock, held from Lock until Unlock.
type FileLock struct {
	f *os.File
}

// Lock takes the lock of the state file at path: path + ".lock", locked
// exclusively (flock(2) where the system has it). Two daemons sharing one
// state file would each restore it and overwrite the other's snapshots, so
// a daemon holds the lock while it runs. The lock belongs to the process:
// the kernel releases it when the process ends, however it ends, so no
// stale lock outlives a crash. The lock file holds the holder's pid, which
// the error names when the lock is taken. A symlink at the lock file's
// name is refused, not followed (where the system has O_NOFOLLOW). On
// systems without flock, Lock
// locks nothing and always succeeds.
func Lock(path string) (*FileLock, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|noFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state file lock: %w", err)
	}
	if err := lockFile(f); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, ErrLocked) {
			pid := strings.TrimSpace(string(holder))
			if _, perr := strconv.Atoi(pid); perr != nil {
				pid = "unknown"
			}
			return nil, fmt.Errorf("%w: %s is locked (%s) by pid %s", ErrLocked, path, name, pid)
		}
		return nil, fmt.Errorf("state file lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &FileLock{f: f}, nil
}

// Unlock releases the lock. The lock file stays (removing it would race
// with a process taking the lock); it is harmless.
func (l *FileLock) Unlock() error {
	return l.f.Close()
}
