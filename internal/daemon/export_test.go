package daemon

// SetRestoring makes a daemon started with cfg call f as it starts
// restoring its buckets, and wait for f to return.
func SetRestoring(cfg *Config, f func()) { cfg.restoring = f }
