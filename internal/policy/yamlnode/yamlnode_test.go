package yamlnode

import (
	"fmt"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// parse returns the root node of doc.
func parse(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	return n.Content[0]
}

// recorder returns a Reader whose problems, each "line: path: problem",
// are appended to *got.
func recorder(got *[]string, maxItems int) *Reader {
	return &Reader{MaxItems: maxItems, Errorf: func(n *yaml.Node, path, format string, args ...any) {
		*got = append(*got, fmt.Sprintf("%d: %s: %s", n.Line, path, fmt.Sprintf(format, args...)))
	}}
}

func TestDescribe(t *testing.T) {
	m := parse(t, "a: &x {k: v}\nb: *x\nc: [1]\nd: 'text'\ne: 200\nf: ~\ng:\nh: true\n").Content
	want := []string{"a mapping", "a mapping", "a list", `"text"`, "200", "nothing", "nothing", "true"}
	for i, w := range want {
		if got := Describe(m[2*i+1]); got != w {
			t.Errorf("%s: Describe = %s; want %s", m[2*i].Value, got, w)
		}
	}
	if got := Describe(nil); got != "nothing" {
		t.Errorf("Describe(nil) = %s; want nothing", got)
	}
	if IsNull(nil) || !IsNull(m[11]) || !IsNull(m[13]) || IsNull(m[9]) {
		t.Error("IsNull: want true for ~ and an empty value only")
	}
}

func TestFieldsReportsAndGoesOn(t *testing.T) {
	var got []string
	m := recorder(&got, 0).Fields(parse(t, "a: 1\nb: 2\n[x]: 3\na: 4\nc: ~\n"), "top", []string{"a", "c"})
	want := []string{
		"2: top.b: unknown field (want one of a, c)",
		"3: top: a key that is a list (want one of a, c)",
		"4: top.a: given twice (first at line 1)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q; want %q", got, want)
	}
	if len(m) != 2 || m["a"].Value != "1" || !IsNull(m["c"]) {
		t.Errorf("fields %v; want a: 1 and c: null", m)
	}
}

func TestListBoundReportedOnce(t *testing.T) {
	var got []string
	r := recorder(&got, 3)
	y := parse(t, "[a, b]")
	for i, want := range []int{2, 0, 0} {
		if items := r.List(y, "l"); len(items) != want {
			t.Errorf("call %d: %d items; want %d", i, len(items), want)
		}
	}
	if want := []string{"1: l: more than 3 list items in the policy (aliases counted each time they are used)"}; !slices.Equal(got, want) {
		t.Errorf("problems %q; want %q", got, want)
	}
	unbounded := recorder(&got, 0)
	for range 5 {
		if items := unbounded.List(y, "l"); len(items) != 2 {
			t.Fatalf("MaxItems 0: %d items; want 2", len(items))
		}
	}
}

func TestStrTakesAnyScalar(t *testing.T) {
	var got []string
	r := recorder(&got, 0)
	m := parse(t, "a: 200\nb: ~\nc: [x]\n").Content
	for i, want := range []string{"200", "", ""} {
		if s, _ := r.Str(m[2*i+1], m[2*i].Value); s != want {
			t.Errorf("%s: %q; want %q", m[2*i].Value, s, want)
		}
	}
	if want := []string{"3: c: want a string; got a list"}; !slices.Equal(got, want) {
		t.Errorf("problems %q; want %q", got, want)
	}
}
