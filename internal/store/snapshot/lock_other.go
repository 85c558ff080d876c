//go:build !unix

package snapshot

import "os"

// noFollow is 0: this system may have no O_NOFOLLOW.
const noFollow = 0

// lockFile locks nothing: this system has no flock.
func lockFile(*os.File) error { return nil }
