//go:build unix

package snapshot

import (
	"errors"
	"os"
	"syscall"
)

// noFollow makes opening a symlink fail.
const noFollow = syscall.O_NOFOLLOW

// lockFile locks f exclusively without waiting: ErrLocked when another
// open file description holds it.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrLocked
		}
		return err
	}
}
