package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/ratelimitd/ratelimitd/internal/upstreamenv"
)

// upstreamName is the name envoyproxy/ratelimit's binary has in its image
// (/bin/ratelimit), which Envoy Gateway's deployment runs.
const upstreamName = "ratelimit"

// wantsUpstreamEnv reports whether the daemon reads envoyproxy/ratelimit's
// environment: when it was started as upstream's binary, or with
// --upstream-env.
func wantsUpstreamEnv(args []string) bool {
	return filepath.Base(os.Args[0]) == upstreamName ||
		slices.ContainsFunc(args, func(a string) bool {
			return a == "--upstream-env" || a == "-upstream-env" || a == "--upstream-env=true"
		})
}

// applyUpstreamEnv sets the flags that upstream's environment says, before
// the command line is parsed (so that the command line wins). Each is set
// with fs.Set, so a flag's own check refuses a variable's value as it
// refuses the same value on the command line; the error names the variable
// and the flag. The caller
// logs the translation's warnings and takes its Redis password.
func applyUpstreamEnv(fs *flag.FlagSet) (upstreamenv.Translation, error) {
	tr, err := upstreamenv.Translate(os.LookupEnv)
	if err != nil {
		return tr, fmt.Errorf("envoyproxy/ratelimit's environment: %w", err)
	}
	for _, f := range tr.Flags {
		if err := fs.Set(f.Name, f.Value); err != nil {
			return tr, fmt.Errorf("envoyproxy/ratelimit's environment: %s: --%s=%s: %w", f.From, f.Name, f.Value, err)
		}
	}
	return tr, nil
}
