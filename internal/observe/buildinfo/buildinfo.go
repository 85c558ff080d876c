// Package buildinfo says which build of ratelimitd is running: its module
// version, the commit it was built from and that commit's time, read from
// the build information the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo). Nothing is set by hand at build time, so
// every way of building reports itself:
//
//   - go build or go run in a git checkout (Go 1.24 or later): the version
//     the toolchain derives from the checkout (a tag such as "v1.2.0", or a
//     pseudo-version such as "v0.0.0-20261122213000-df343e3abcde", with
//     "+dirty" when the tree had uncommitted changes) and the vcs.revision,
//     vcs.time and vcs.modified settings;
//   - go install github.com/ratelimitd/ratelimitd/cmd/ratelimitd@VERSION:
//     the module version, and no vcs settings (a module download carries no
//     repository); for a pseudo-version, the commit and its time are read
//     from the version itself (only the 12-digit commit prefix is known);
//   - a build with -buildvcs=false outside a tagged version: "(devel)",
//     commit and time unknown.
//
// The build date reported is the commit's time (vcs.time), not the moment
// of the build, so that building the same commit twice gives the same bytes.
package buildinfo

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Unknown is the value of a field the build information does not give.
const Unknown = "unknown"

// Info describes one build of the program.
type Info struct {
	// Version is the main module's version: a tag ("v1.2.0"), a
	// pseudo-version, or "(devel)"; a "+dirty" suffix means the checkout had
	// uncommitted changes. Unknown when the binary has no build information.
	Version string
	// Commit is the revision the binary was built from: the full hash from
	// vcs.revision, or the 12-hex-digit prefix a pseudo-version carries.
	// Unknown when neither is there.
	Commit string
	// Time is the commit's time (vcs.time, or a pseudo-version's timestamp),
	// in UTC; the zero Time when unknown.
	Time time.Time
	// Modified reports that the checkout had uncommitted changes
	// (vcs.modified=true, or a "+dirty" version).
	Modified bool
	// GoVersion is the toolchain that built the binary ("go1.26.8").
	GoVersion string
	// Platform is the target, GOOS/GOARCH ("linux/amd64").
	Platform string
}

// Read returns the running binary's build information. It never fails:
// what the binary does not record is reported as Unknown.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return FromBuildInfo(bi)
}

// pseudoVersion matches the revision part of a Go module pseudo-version
// (vX.Y.Z-yyyymmddhhmmss-abcdefabcdef, vX.Y.Z-pre.0.yyyymmddhhmmss-…,
// vX.Y.(Z+1)-0.yyyymmddhhmmss-…), with the suffixes a version may carry.
var pseudoVersion = regexp.MustCompile(`[-.](\d{14})-([0-9a-f]{12})(\+incompatible)?(\+dirty)?$`)

// FromBuildInfo is Read for a given build information; nil means the
// binary has none (built without module support).
func FromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Version: Unknown, Commit: Unknown, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if v := bi.Main.Version; v != "" {
		info.Version = v
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339Nano, s.Value); err == nil {
				info.Time = t.UTC()
			}
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		info.Platform = goos + "/" + goarch
	}
	if m := pseudoVersion.FindStringSubmatch(info.Version); m != nil {
		if info.Commit == Unknown {
			info.Commit = m[2]
		}
		if info.Time.IsZero() {
			if t, err := time.Parse("20060102150405", m[1]); err == nil {
				info.Time = t
			}
		}
	}
	if strings.HasSuffix(info.Version, "+dirty") {
		info.Modified = true
	}
	return info
}

// Date is the commit's time as RFC 3339 in UTC ("2026-11-22T21:30:00Z"),
// or Unknown.
func (i Info) Date() string {
	if i.Time.IsZero() {
		return Unknown
	}
	return i.Time.Format(time.RFC3339)
}

// String is the one-line form ratelimitd --version prints:
//
//	ratelimitd v1.2.0 (commit 0123456789abcdef0123456789abcdef01234567, 2026-11-22T21:30:00Z, go1.26.8 linux/amd64)
//
// with ", modified" after the date when the checkout had uncommitted
// changes.
func (i Info) String() string {
	mod := ""
	if i.Modified {
		mod = ", modified"
	}
	return fmt.Sprintf("ratelimitd %s (commit %s, %s%s, %s %s)", i.Version, i.Commit, i.Date(), mod, i.GoVersion, i.Platform)
}
