package aigateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binaries are the programs the suite runs, built once by TestMain into a
// temporary directory.
var binaries struct {
	// daemon is ratelimitd, built in its own module (../..) with that
	// module's dependencies: what a user deploys, not a build of it with
	// this suite's newer go-control-plane.
	daemon string
	// aigwDriver is aigwdriver/main.go compiled as a package of Envoy AI
	// Gateway's module, egDriver egdriver/main.go as one of Envoy
	// Gateway's (see buildDriver).
	aigwDriver, egDriver string
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "aigateway-conformance-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if binaries.daemon, err = buildDaemon(dir); err != nil {
		return 0, err
	}
	if binaries.aigwDriver, err = buildDriver(dir, "github.com/envoyproxy/ai-gateway", "aigwdriver/main.go", "aigatewaydriver"); err != nil {
		return 0, err
	}
	if binaries.egDriver, err = buildDriver(dir, "github.com/envoyproxy/gateway", "egdriver/main.go", "envoygatewaydriver"); err != nil {
		return 0, err
	}
	code := m.Run()
	report.print(os.Stdout)
	return code, nil
}

func goCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// buildDaemon builds ratelimitd from the repository this suite lives in,
// or returns $RATELIMITD_BINARY when it is set: a daemon built elsewhere
// (another branch, a release) to hold to the same promises.
func buildDaemon(dir string) (string, error) {
	if bin := os.Getenv("RATELIMITD_BINARY"); bin != "" {
		return filepath.Abs(bin)
	}
	root, err := goCmd(".", "list", "-m", "-f", "{{.Dir}}", "github.com/ratelimitd/ratelimitd")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ratelimitd")
	_, err = goCmd(root, "build", "-o", bin, "./cmd/ratelimitd")
	return bin, err
}

// buildDriver compiles file (a main package with build tag tag) as the
// package MODULE/internal/ratelimitdconformance, so that it may import
// module's internal packages (its translators), which Go lets no other
// module import. It copies, into a temporary directory, the module as the
// module cache holds it (verified against go.sum when it was downloaded;
// nothing changed), adds that one file, and builds with a copy of this
// module's go.mod that replaces module by that directory: the same versions
// of every dependency, pinned by this module's go.mod and go.sum.
func buildDriver(dir, module, file, tag string) (string, error) {
	out, err := goCmd(".", "mod", "download", "-json", module)
	if err != nil {
		return "", err
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil {
		return "", err
	}
	src := mod.Dir
	if src == "" {
		return "", errors.New(module + ": not in the module cache")
	}
	name := filepath.Base(filepath.Dir(file))
	tree := filepath.Join(dir, name+"-module")
	if err := os.CopyFS(tree, os.DirFS(src)); err != nil {
		return "", err
	}
	pkg := filepath.Join(tree, "internal", "ratelimitdconformance")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return "", err
	}
	driver, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(pkg, "main.go"), driver, 0o644); err != nil {
		return "", err
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		return "", err
	}
	gosum, err := os.ReadFile("go.sum")
	if err != nil {
		return "", err
	}
	here, err := os.Getwd()
	if err != nil {
		return "", err
	}
	// Replacements by relative path are read from the directory of the
	// module (here), whatever file holds them; the new one is absolute.
	gomod = append(gomod, []byte("\nreplace "+module+" => "+tree+"\n")...)
	modfile := filepath.Join(dir, name+".mod")
	if err := os.WriteFile(modfile, gomod, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".sum"), gosum, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	// -trimpath: the tree's directory is new each run; without it, every
	// package of the module would be compiled again each time.
	_, err = goCmd(here, "build", "-trimpath", "-modfile", modfile, "-tags", tag, "-o", bin, module+"/internal/ratelimitdconformance")
	return bin, err
}
