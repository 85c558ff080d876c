package redis

import (
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/big"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// luaNumbers returns the numbers that src's top-level locals in capitals
// hold: `local A, B = 1, 2` and bignums `local C = { 0, 0, 16384 }` (limbs
// of 24 bits, least significant first). Other values (strings, -math.huge,
// calls) are left out.
func luaNumbers(t *testing.T, src string) map[string]*big.Int {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^local ([A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)*) = (.*?)\s*(?:--.*)?$`)
	values := regexp.MustCompile(`\{[^}]*\}|[^,]+`)
	out := make(map[string]*big.Int)
	for _, m := range decl.FindAllStringSubmatch(src, -1) {
		names := strings.Split(m[1], ", ")
		vals := values.FindAllString(m[2], -1)
		if len(vals) != len(names) {
			continue
		}
		for i, name := range names {
			if n, ok := luaNumber(strings.TrimSpace(vals[i])); ok {
				out[name] = n
			}
		}
	}
	return out
}

func luaNumber(v string) (*big.Int, bool) {
	if limbs, ok := strings.CutPrefix(v, "{"); ok {
		n := new(big.Int)
		fields := strings.Split(strings.TrimSuffix(limbs, "}"), ",")
		for i := len(fields) - 1; i >= 0; i-- {
			f := strings.TrimSpace(fields[i])
			if f == "" {
				continue
			}
			limb, ok := new(big.Int).SetString(f, 10)
			if !ok {
				return nil, false
			}
			n.Lsh(n, 24).Add(n, limb)
		}
		return n, true
	}
	return new(big.Int).SetString(v, 10)
}

// TestLuaConstantsAreGos holds the numbers the scripts share with Go to Go's
// values, reading the Lua sources: the algorithms, decision codes and
// charge kinds (now.lua), the bounds MaxCount, MaxInFlight and MaxTime (now.lua),
// MaxSpan and math.MaxInt64 (decide.lua). It fails when either side
// changes alone: a value changed, a Go algorithm, code or kind without its
// Lua constant, or a constant in now.lua that Go does not have (now.lua is
// what every script shares).
func TestLuaConstantsAreGos(t *testing.T) {
	want := make(map[string]int64)
	algNames := map[algorithms.Algorithm]string{
		algorithms.FixedWindow: "FIXED", algorithms.SlidingWindow: "SLIDING",
		algorithms.TokenBucket: "TOKEN", algorithms.LeakyBucket: "LEAKY", algorithms.LeakyBucketQueue: "QUEUE",
		algorithms.Concurrency: "CONC",
	}
	for _, a := range algorithms.Algorithms() {
		name, ok := algNames[a]
		if !ok {
			t.Errorf("algorithm %v has no constant in now.lua (name it in this test)", a)
			continue
		}
		want[name] = int64(a)
	}
	codeNames := map[algorithms.Code]string{algorithms.Allowed: "ALLOWED", algorithms.Denied: "DENIED", algorithms.OverCapacity: "OVER"}
	for c, name := range codeNames {
		want[name] = int64(c)
	}
	if c := algorithms.Code(len(codeNames)); c.String() != "Code(?)" {
		t.Errorf("code %v has no constant in now.lua (name it in this test)", c)
	}
	// Every Kind that has a name, to the first that has none: a kind added
	// in Go needs its constant in now.lua, named as its String.
	for k := algorithms.Kind(0); !strings.HasPrefix(k.String(), "Kind("); k++ {
		want[strings.ToUpper(k.String())] = int64(k)
	}
	want["MAXCOUNT"] = algorithms.MaxCount
	want["MAXINFLIGHT"] = algorithms.MaxInFlight
	want["MAXMS"], want["MAXSUB"] = algorithms.MaxTime/1e6, algorithms.MaxTime%1e6

	now := luaNumbers(t, nowLua)
	for name, v := range want {
		got, ok := now[name]
		switch {
		case !ok:
			t.Errorf("now.lua has no %s; Go's is %d", name, v)
		case got.Cmp(big.NewInt(v)) != 0:
			t.Errorf("now.lua's %s = %v; Go's is %d", name, got, v)
		}
	}
	for name, v := range now {
		if _, ok := want[name]; !ok {
			t.Errorf("now.lua's %s = %v has no Go counterpart here: add it to this test", name, v)
		}
	}
	if len(now) < 15 {
		t.Errorf("read %d constants from now.lua, want at least 15: %v", len(now), now)
	}

	decide := luaNumbers(t, decideLua)
	for name, v := range map[string]int64{"MAXSPAN": int64(algorithms.MaxSpan), "MAXINT64": math.MaxInt64} {
		if got, ok := decide[name]; !ok || got.Cmp(big.NewInt(v)) != 0 {
			t.Errorf("decide.lua's %s = %v; Go's is %d", name, got, v)
		}
	}
}

// TestLuaSectionsMirrorTheirGoFiles holds fast.lua and decide.lua to the Go
// files of internal/core/algorithms: each section is headed by the names
// of Go files that exist, and each function in it that "mirrors" a Go
// function names one declared in those files, so that a reader goes from
// one Go file to one Lua section.
func TestLuaSectionsMirrorTheirGoFiles(t *testing.T) {
	dir := filepath.Join("..", "..", "core", "algorithms")
	declared := make(map[string]string) // function or method name → file
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok {
				declared[fn.Name.Name] = filepath.Base(path)
			}
		}
	}
	heading := regexp.MustCompile(`^-- ([a-z]+\.go(?:, [a-z]+\.go)*): `)
	mirror := regexp.MustCompile(`^-- \w+ mirrors (?:Limit\.|State\.)?(\w+)`)
	for name, src := range map[string]string{"fast.lua": fastLua, "decide.lua": decideLua} {
		var files []string // the current section's
		sections, mirrors := 0, 0
		for i, line := range strings.Split(src, "\n") {
			if m := heading.FindStringSubmatch(line); m != nil {
				files = strings.Split(m[1], ", ")
				sections++
				for _, f := range files {
					if !fileDeclares(declared, f) {
						t.Errorf("%s:%d: section of %s, which declares no function in %s", name, i+1, f, dir)
					}
				}
				continue
			}
			m := mirror.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			mirrors++
			switch in, ok := declared[m[1]]; {
			case !ok:
				t.Errorf("%s:%d: mirrors %s, which %s does not declare", name, i+1, m[1], dir)
			case files == nil:
				t.Errorf("%s:%d: mirrors %s (%s) outside a section", name, i+1, m[1], in)
			case !slices.Contains(files, in):
				t.Errorf("%s:%d: mirrors %s of %s in the section of %s", name, i+1, m[1], in, strings.Join(files, ", "))
			}
		}
		if sections < 4 || mirrors < 20 {
			t.Errorf("%s: read %d sections and %d mirrors; the headings or comments changed form", name, sections, mirrors)
		}
	}
}

func fileDeclares(declared map[string]string, file string) bool {
	for _, f := range declared {
		if f == file {
			return true
		}
	}
	return false
}
