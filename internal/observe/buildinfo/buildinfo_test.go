package buildinfo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo"
)

const rev = "df343e3abcde0123456789abcdef0123456789ab"

func settings(kv ...string) []debug.BuildSetting {
	var s []debug.BuildSetting
	for i := 0; i < len(kv); i += 2 {
		s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
	}
	return s
}

func TestFromBuildInfo(t *testing.T) {
	commitTime := time.Date(2026, 11, 22, 21, 30, 0, 0, time.UTC)
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want buildinfo.Info
	}{{
		name: "go build in a clean checkout at a tag",
		bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"},
			Settings: settings("GOOS", "linux", "GOARCH", "arm64", "vcs", "git", "vcs.revision", rev, "vcs.time", "2026-11-22T21:30:00Z", "vcs.modified", "false")},
		want: buildinfo.Info{Version: "v1.2.0", Commit: rev, Time: commitTime, GoVersion: "go1.26.8", Platform: "linux/arm64"},
	}, {
		name: "go build in a dirty checkout between tags",
		bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261122213000-df343e3abcde+dirty"},
			Settings: settings("GOOS", "linux", "GOARCH", "amd64", "vcs.revision", rev, "vcs.time", "2026-11-22T21:30:00Z", "vcs.modified", "true")},
		want: buildinfo.Info{Version: "v0.0.0-20261122213000-df343e3abcde+dirty", Commit: rev, Time: commitTime, Modified: true, GoVersion: "go1.26.8", Platform: "linux/amd64"},
	}, {
		name: "go install at a tag: no vcs settings",
		bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"},
			Settings: settings("GOOS", "darwin", "GOARCH", "arm64")},
		want: buildinfo.Info{Version: "v1.2.0", Commit: buildinfo.Unknown, GoVersion: "go1.26.8", Platform: "darwin/arm64"},
	}, {
		name: "go install at a pseudo-version: commit prefix and time from the version",
		bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261122213000-df343e3abcde"},
			Settings: settings("GOOS", "linux", "GOARCH", "amd64")},
		want: buildinfo.Info{Version: "v0.0.0-20261122213000-df343e3abcde", Commit: "df343e3abcde", Time: commitTime, GoVersion: "go1.26.8", Platform: "linux/amd64"},
	}, {
		name: "go install at a pseudo-version after a pre-release",
		bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.3.0-rc.1.0.20261122213000-df343e3abcde"},
			Settings: settings("GOOS", "linux", "GOARCH", "amd64")},
		want: buildinfo.Info{Version: "v1.3.0-rc.1.0.20261122213000-df343e3abcde", Commit: "df343e3abcde", Time: commitTime, GoVersion: "go1.26.8", Platform: "linux/amd64"},
	}, {
		name: "a pre-release tag is not a pseudo-version",
		bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.3.0-rc.1"},
			Settings: settings("GOOS", "linux", "GOARCH", "amd64")},
		want: buildinfo.Info{Version: "v1.3.0-rc.1", Commit: buildinfo.Unknown, GoVersion: "go1.26.8", Platform: "linux/amd64"},
	}, {
		name: "-buildvcs=false outside a tag",
		bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("GOOS", "linux", "GOARCH", "amd64")},
		want: buildinfo.Info{Version: "(devel)", Commit: buildinfo.Unknown, GoVersion: "go1.26.8", Platform: "linux/amd64"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildinfo.FromBuildInfo(tt.bi); got != tt.want {
				t.Errorf("FromBuildInfo:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestNoBuildInfo(t *testing.T) {
	got := buildinfo.FromBuildInfo(nil)
	if got.Version != buildinfo.Unknown || got.Commit != buildinfo.Unknown || !got.Time.IsZero() || got.Date() != buildinfo.Unknown {
		t.Errorf("FromBuildInfo(nil) = %+v, want version, commit and date unknown", got)
	}
	if got.GoVersion == "" || got.Platform == "" {
		t.Errorf("FromBuildInfo(nil) = %+v, want the running toolchain and platform", got)
	}
}

func TestString(t *testing.T) {
	i := buildinfo.Info{Version: "v1.2.0", Commit: rev, Time: time.Date(2026, 11, 22, 21, 30, 0, 0, time.UTC), GoVersion: "go1.26.8", Platform: "linux/amd64"}
	want := "ratelimitd v1.2.0 (commit " + rev + ", 2026-11-22T21:30:00Z, go1.26.8 linux/amd64)"
	if got := i.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	i.Modified = true
	if got := i.String(); !strings.Contains(got, "2026-11-22T21:30:00Z, modified, go1.26.8") {
		t.Errorf("String() of a modified build = %q, want it to say modified after the date", got)
	}
}

// TestBuiltFromCheckout builds a program that prints Read(), the way a user
// builds ratelimitd from a git checkout (go build -buildvcs=true), in a
// repository made for the test: its own module of the same path holding a
// copy of this package. Go stamps the commit, its time and whether the tree
// was modified; a tag becomes the version.
func TestBuiltFromCheckout(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (the Go toolchain stamps builds with it):", err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile("buildinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	write("go.mod", "module github.com/ratelimitd/ratelimitd\n\ngo 1.26\n")
	write("internal/observe/buildinfo/buildinfo.go", string(src))
	write("cmd/probe/main.go", "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/ratelimitd/ratelimitd/internal/observe/buildinfo\"\n)\n\nfunc main() { fmt.Println(buildinfo.Read()) }\n")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
			"GIT_AUTHOR_DATE=2026-11-22T21:30:00Z", "GIT_COMMITTER_DATE=2026-11-22T21:30:00Z", "GOWORK=off", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	probe := func() string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "probe")
		run("go", "build", "-buildvcs=true", "-o", bin, "./cmd/probe")
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	run("git", "init", "-q")
	run("git", "add", ".")
	run("git", "commit", "-q", "-m", "probe")
	head := run("git", "rev-parse", "HEAD")
	suffix := " (commit " + head + ", 2026-11-22T21:30:00Z, "

	want := "ratelimitd v0.0.0-20261122213000-" + head[:12] + suffix
	if got := probe(); !strings.HasPrefix(got, want) {
		t.Errorf("built from a clean checkout: %q, want it to start %q", got, want)
	}
	write("cmd/probe/extra.go", "package main\n")
	want = "ratelimitd v0.0.0-20261122213000-" + head[:12] + "+dirty" + suffix + "modified, "
	if got := probe(); !strings.HasPrefix(got, want) {
		t.Errorf("built from a modified checkout: %q, want it to start %q", got, want)
	}
	os.Remove(filepath.Join(dir, "cmd/probe/extra.go"))
	run("git", "tag", "v1.2.0")
	want = "ratelimitd v1.2.0" + suffix
	if got := probe(); !strings.HasPrefix(got, want) {
		t.Errorf("built from a tagged checkout: %q, want it to start %q", got, want)
	}
}
