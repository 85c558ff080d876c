package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/internal/daemon/upstreamenv"
)

// upstreamName is the name envoyproxy/ratelimit's binary has in its image
// (/bin/ratelimit), which Envoy Gateway's deployment runs.
const upstreamName = "ratelimit"

// wantsUpstreamEnv reports whether the daemon reads envoyproxy/ratelimit's
// environment: when it was started as upstream's binary, or with
// --upstream-env.
func wantsUpstreamEnv(args []string) bool {
	return startedAsUpstream() ||
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

// missingPolicyDir is the error for a policy directory that upstream's
// environment named (RUNTIME_ROOT and its companions) and that does not
// exist, naming the variables; nil when the command line gave --config,
// or the directory exists.
func missingPolicyDir(flags *flag.FlagSet, tr upstreamenv.Translation) error {
	for _, f := range tr.Flags {
		if f.Name != "config" || flags.Lookup("config").Value.String() != f.Value {
			continue
		}
		if _, err := os.Stat(f.Value); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("envoyproxy/ratelimit's environment: the policy directory %s does not exist; it is joined from %s", f.Value, f.From)
		}
	}
	return nil
}

// startedAsUpstream reports whether the binary was started under
// upstream's name.
func startedAsUpstream() bool { return filepath.Base(os.Args[0]) == upstreamName }

// upstreamArgs splits args, the command line of the binary started as
// upstream's, into those ratelimitd reads and those it ignores, as
// upstream's binary reads no command line at all (its settings are its
// environment), so that a deployment written for upstream that passes
// arguments of its own (Envoy AI Gateway's --quotaRateLimitServiceAddr=…)
// starts. Kept: each flag fs defines, with its value when that is the next
// argument, and -h, -help. Ignored: any other flag (-x, --x, --x=v),
// every argument that is not a flag (an ignored flag's separate value
// among them), and everything after "--". ignored names the ignored flags as
// given (without their values, which may be secrets) and ends with "N other
// arguments" when there are others.
func upstreamArgs(fs *flag.FlagSet, args []string) (kept []string, ignored []string) {
	others := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			others += len(args) - i - 1
			break
		}
		if len(a) < 2 || a[0] != '-' {
			others++
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		switch {
		case f == nil && (name == "h" || name == "help"):
			kept = append(kept, a)
		case f == nil:
			given, _, _ := strings.Cut(a, "=")
			ignored = append(ignored, given)
		default:
			kept = append(kept, a)
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) && i+1 < len(args) {
				i++
				kept = append(kept, args[i])
			}
		}
	}
	switch {
	case others == 1:
		ignored = append(ignored, "1 other argument")
	case others > 1:
		ignored = append(ignored, strconv.Itoa(others)+" other arguments")
	}
	return kept, ignored
}

// ignoredArgsWarning is the one warning that names the arguments
// upstreamArgs ignored.
func ignoredArgsWarning(ignored []string) string {
	return "command-line arguments ignored, as envoyproxy/ratelimit ignores its command line (started as " + upstreamName + "): " + strings.Join(ignored, ", ")
}
