package aigateway

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binaries are the two programs the suite runs, built once by TestMain into
// a temporary directory.
var binaries struct {
	dir string
	// daemon is ratelimitd, built in its own module (../..) with that
	// module's dependencies: what a user deploys, not a build of it with
	// this suite's newer go-control-plane.
	daemon string
	// driver is aigwdriver/main.go compiled as a package of Envoy AI
	// Gateway's module (see buildDriver).
	driver string
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
	binaries.dir = dir
	if binaries.daemon, err = buildDaemon(dir); err != nil {
		return 0, err
	}
	if binaries.driver, err = buildDriver(dir); err != nil {
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

// buildDaemon builds ratelimitd from the repository this suite lives in.
func buildDaemon(dir string) (string, error) {
	root, err := goCmd(".", "list", "-m", "-f", "{{.Dir}}", "github.com/ratelimitd/ratelimitd")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ratelimitd")
	_, err = goCmd(root, "build", "-o", bin, "./cmd/ratelimitd")
	return bin, err
}

// buildDriver compiles aigwdriver/main.go as the package
// github.com/envoyproxy/ai-gateway/internal/ratelimitdconformance, so that it
// may import AI Gateway's internal packages (its QuotaPolicy translator and
// extension server), which Go lets no other module import. It lays out, in
// a temporary directory, AI Gateway's module as the module cache holds it
// (symbolic links to each of its directories, nothing copied or changed)
// plus that one file, and builds with a copy of this module's go.mod that
// replaces github.com/envoyproxy/ai-gateway by that directory: the same
// versions of every dependency, pinned by this module's go.mod and go.sum.
func buildDriver(dir string) (string, error) {
	if _, err := goCmd(".", "mod", "download", "github.com/envoyproxy/ai-gateway"); err != nil {
		return "", err
	}
	src, err := goCmd(".", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ai-gateway")
	if err != nil {
		return "", err
	}
	if src == "" {
		return "", errors.New("github.com/envoyproxy/ai-gateway: not in the module cache")
	}
	farm := filepath.Join(dir, "ai-gateway")
	pkg := filepath.Join(farm, "internal", "ratelimitdconformance")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return "", err
	}
	link := func(from, to string) error {
		entries, err := os.ReadDir(from)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if from == src && e.Name() == "internal" {
				continue
			}
			if err := os.Symlink(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	if err := link(src, farm); err != nil {
		return "", err
	}
	if err := link(filepath.Join(src, "internal"), filepath.Join(farm, "internal")); err != nil {
		return "", err
	}
	driver, err := os.ReadFile(filepath.Join("aigwdriver", "main.go"))
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
	gomod = append(gomod, []byte("\nreplace github.com/envoyproxy/ai-gateway => "+farm+"\n")...)
	modfile := filepath.Join(dir, "driver.mod")
	if err := os.WriteFile(modfile, gomod, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "driver.sum"), gosum, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "aigwdriver")
	_, err = goCmd(here, "build", "-modfile", modfile, "-tags", "aigatewaydriver", "-o", bin,
		"github.com/envoyproxy/ai-gateway/internal/ratelimitdconformance")
	return bin, err
}
