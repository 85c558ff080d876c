package daemon

// SetRestoring makes every daemon started from now on call f as it starts
// restoring its buckets (and wait for f to return), until it is set to nil.
func SetRestoring(f func()) { restoring = f }
