//go:build !unix

package snapshot

import "os"

// lockFile locks nothing: this system has no flock.
func lockFile(*os.File) error { return nil }
