// Package internal_test holds internal/ to its layers: each folder directly
// under internal/ is a layer, and a package may import only packages of its
// own layer or of the layers below it (CONTRIBUTING.md, "Layout").
package internal_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ratelimitd/ratelimitd/"

// layers lists internal/'s folders from the bottom up. A package of layer i
// may import packages of layers 0..i. Test harnesses (testkit, and the
// packages whose name ends in "test", such as storetest) are imported by
// tests and other harnesses only; testkit's may import any layer, the
// others keep to their folder's place.
var layers = []string{
	"core",      // the clock, exact arithmetic, the quota allocator: no I/O
	"store",     // buckets kept: memory, Redis, the guard around a remote store, snapshots
	"transport", // the wire's guards: TLS, connections, streams, bytes not yet read, hosts
	"policy",    // policies: files, xDS, the YAML they are written in, watching for changes
	"engine",    // one request: match, plan, settle through the store, answer; the quota service
	"observe",   // metrics, traces and the top-denied list: observers of the engine
	"api",       // adapters: ratelimit.v1, Envoy's v3 and RLQS, HTTP/JSON; authorization
	"operator",  // the operator's surface: console, admin endpoints, simulate, bench
	"daemon",    // assembly: listeners, servers, reload, shutdown
	"testkit",   // harnesses for tests only
}

func layerOf(t *testing.T, pkg string) (int, bool) {
	rest, ok := strings.CutPrefix(pkg, module+"internal/")
	if !ok {
		return 0, false
	}
	folder, _, _ := strings.Cut(rest, "/")
	for i, l := range layers {
		if l == folder {
			return i, true
		}
	}
	t.Errorf("%s: folder internal/%s is not a layer; add it to layers (and to CONTRIBUTING.md)", pkg, folder)
	return 0, false
}

func isTestSupport(pkg string) bool {
	if strings.HasPrefix(pkg, module+"internal/testkit/") {
		return true
	}
	last := pkg[strings.LastIndex(pkg, "/")+1:]
	return strings.HasSuffix(last, "test")
}

// TestNoArrowPointsUp reads the packages' non-test imports with go list.
func TestNoArrowPointsUp(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	packages := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg, imports := fields[0], fields[1:]
		packages++
		from, internal := layerOf(t, pkg)
		for _, imp := range imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			if isTestSupport(imp) {
				if !isTestSupport(pkg) {
					t.Errorf("%s imports %s, a test harness", short(pkg), short(imp))
				}
				continue
			}
			if !internal || strings.HasPrefix(pkg, module+"internal/testkit/") {
				continue
			}
			if to, ok := layerOf(t, imp); ok && to > from {
				t.Errorf("%s (layer %s) imports %s (layer %s): an arrow pointing up",
					short(pkg), layers[from], short(imp), layers[to])
			}
		}
	}
	if packages < 50 {
		t.Fatalf("go list named %d packages; expected the whole module", packages)
	}
}

func short(pkg string) string { return strings.TrimPrefix(pkg, module) }
