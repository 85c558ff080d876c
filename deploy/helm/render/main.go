// Command render prints the chart's manifests as `helm template` does,
// with Helm's own template engine and no helm binary:
//
//	cd deploy/helm && go run ./render [--name edge] [--namespace limits] [-f values.yaml]... [--set key=value]...
//
// Values files and --set apply in order over the chart's values.yaml, as
// with helm. The output goes to standard output, one document a template.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	name := fs.String("name", "ratelimitd", "release name")
	namespace := fs.String("namespace", "default", "release namespace")
	chartDir := fs.String("chart", defaultChart(), "chart directory")
	var files, sets list
	fs.Var(&files, "f", "values file (repeatable)")
	fs.Var(&sets, "set", "key=value, as helm's --set (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	values := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		values = chartutil.CoalesceTables(v, values)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, values); err != nil {
			return fmt.Errorf("--set %s: %w", s, err)
		}
	}
	ch, err := loader.Load(*chartDir)
	if err != nil {
		return err
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: *name, Namespace: *namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return err
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return err
	}
	var names []string
	for n, text := range out {
		if strings.HasSuffix(n, ".yaml") && strings.TrimSpace(text) != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("---\n# Source: %s\n%s\n", n, strings.TrimSpace(out[n]))
	}
	return nil
}

// defaultChart is the chart beside this command's source.
func defaultChart() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "ratelimitd"
	}
	return filepath.Join(filepath.Dir(file), "..", "ratelimitd")
}
