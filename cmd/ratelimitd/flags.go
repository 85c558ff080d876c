package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// parseFlags parses args into fs, whose Usage prints the full help to
// stderr. It reports whether the caller should go on; when it should not,
// code is the exit status: 0 after --help (the full help printed), 2 after
// a mistake. A mistake is told in at most two lines — what was wrong, with a
// near flag name for an unknown one, and where the help is — so that the
// error does not scroll away behind every flag's description.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	fs.Usage = usage
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		usage()
		return 0, false
	}
	fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), flagMistake(fs, err))
	fmt.Fprintf(stderr, "run '%s --help' for every flag\n", fs.Name())
	return 2, false
}

// flagMistake rewords the flag package's error for an unknown flag, naming
// the defined flag nearest to it when there is one.
func flagMistake(fs *flag.FlagSet, err error) string {
	if m := invalidValue.FindStringSubmatch(err.Error()); m != nil {
		reason := m[3]
		if reason == "parse error" { // a boolean flag's only reason
			reason = "want true or false"
		}
		return fmt.Sprintf("--%s %s: %s", m[2], m[1], reason) // as the flag was given
	}
	name, unknown := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !unknown {
		return err.Error()
	}
	msg := fmt.Sprintf("unknown flag --%s", name)
	if near := nearestFlag(fs, name); near != "" {
		msg += fmt.Sprintf(" (did you mean --%s?)", near)
	}
	return msg
}

// invalidValue matches the flag package's error for a value its flag
// refused: the value, the flag's name and the flag's own reason.
var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-([^:]+): (.*)$`)

// nearestFlag returns the defined flag whose name is within two edits of
// name, or that name is a prefix of, the closest first; "" for none.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestDist := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
