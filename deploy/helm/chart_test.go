// Package helm tests the chart in ratelimitd/: rendered by Helm's own
// template engine (the helm.sh/helm/v3 library, pinned in this module's
// go.mod, kept out of ratelimitd's module graph) and checked against the
// real binary's flags.
package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// render renders the chart with values over its defaults, as helm
// template does, and returns the manifests by kind/name.
func render(t *testing.T, values map[string]any) map[string]map[string]any {
	t.Helper()
	ch, err := loader.Load("ratelimitd")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "edge", Namespace: "limits", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for name, text := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(text, "\n---\n") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatalf("%s does not parse: %v\n%s", name, err, doc)
			}
			if m == nil {
				continue
			}
			out[m["kind"].(string)+"/"+get(m, "metadata", "name").(string)] = m
		}
	}
	return out
}

// get walks m by keys and list indexes.
func get(m any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, _ := m.(map[string]any)
			m = mm[k]
		case int:
			l, _ := m.([]any)
			if k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}

func container(t *testing.T, ms map[string]map[string]any) map[string]any {
	t.Helper()
	d := ms["Deployment/edge-ratelimitd"]
	if d == nil {
		t.Fatalf("no Deployment edge-ratelimitd among %v", keys(ms))
	}
	return get(d, "spec", "template", "spec", "containers", 0).(map[string]any)
}

func args(c map[string]any) []string {
	var out []string
	for _, a := range c["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

func keys(ms map[string]map[string]any) []string {
	var k []string
	for n := range ms {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// binary builds ratelimitd from this repository once.
var binary = func() func(t *testing.T) string {
	var path string
	return func(t *testing.T) string {
		t.Helper()
		if path != "" {
			return path
		}
		dir, err := os.MkdirTemp("", "ratelimitd-chart")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "ratelimitd")
		cmd := exec.Command("go", "build", "-o", p, "./cmd/ratelimitd")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building ratelimitd: %v\n%s", err, out)
		}
		path = p
		return p
	}
}()

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// checkArgs checks that every flag the chart renders is one of
// `ratelimitd --help`, and that the binary accepts them all with their
// values (it parses every flag before answering --version).
func checkArgs(t *testing.T, a []string) {
	t.Helper()
	bin := binary(t)
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if len(known) < 30 {
		t.Fatalf("ratelimitd --help lists %d flags:\n%s", len(known), help)
	}
	for _, arg := range a {
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !strings.HasPrefix(arg, "--") || !known[name] {
			t.Errorf("the chart renders %q: not a flag of ratelimitd --help", arg)
		}
	}
	if out, err := exec.Command(bin, append(a, "--version")...).CombinedOutput(); err != nil {
		t.Errorf("ratelimitd %s --version: %v\n%s", strings.Join(a, " "), err, out)
	}
}

// TestDefaults: the memory store with the chart's policy in a ConfigMap,
// the admin port apart, probes on the HTTP port, the measured resources.
func TestDefaults(t *testing.T) {
	ms := render(t, nil)
	c := container(t, ms)
	a := args(c)
	checkArgs(t, a)
	for _, want := range []string{"--config=/etc/ratelimitd/policy.yaml", "--store=memory", "--max-memory=64MiB", "--admin-addr=:9090", "--log-format=json"} {
		if !contains(a, want) {
			t.Errorf("args %v without %s", a, want)
		}
	}
	if cm := ms["ConfigMap/edge-ratelimitd"]; cm == nil || !strings.Contains(get(cm, "data", "policy.yaml").(string), "domain: default") {
		t.Errorf("no ConfigMap with the policy: %v", keys(ms))
	}
	for probe, path := range map[string]string{"startupProbe": "/readyz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if get(c, probe, "httpGet", "path") != path || get(c, probe, "httpGet", "port") != "http" {
			t.Errorf("%s: %v, want %s on the http port", probe, c[probe], path)
		}
	}
	svc := ms["Service/edge-ratelimitd"]
	for _, p := range get(svc, "spec", "ports").([]any) {
		if get(p, "name") == "admin" {
			t.Error("the decision Service carries the admin port")
		}
	}
	for _, k := range []string{"PersistentVolumeClaim/edge-ratelimitd-state", "ServiceMonitor/edge-ratelimitd", "PodDisruptionBudget/edge-ratelimitd"} {
		if ms[k] != nil {
			t.Errorf("%s rendered by default", k)
		}
	}
}

// TestRedisTracingMonitoring: Redis with a password from a Secret (in the
// environment, never in args), traces, and a ServiceMonitor over an admin
// Service of its own.
func TestRedisTracingMonitoring(t *testing.T) {
	ms := render(t, map[string]any{
		"store":          "redis",
		"replicaCount":   3,
		"redis":          map[string]any{"addr": "redis.limits:6379", "failureMode": "closed", "tls": true, "passwordSecret": map[string]any{"name": "redis-auth", "key": "pw"}},
		"tracing":        map[string]any{"endpoint": "http://otel.observability:4317", "sampleRatio": "0.1"},
		"serviceMonitor": map[string]any{"enabled": true},
		"extraArgs":      []any{"--shadow-mode"},
	})
	c := container(t, ms)
	a := args(c)
	checkArgs(t, a)
	for _, want := range []string{"--store=redis", "--redis-addr=redis.limits:6379", "--redis-failure-mode=closed", "--redis-tls",
		"--otlp-endpoint=http://otel.observability:4317", "--otlp-protocol=grpc", "--trace-sample-ratio=0.1", "--shadow-mode"} {
		if !contains(a, want) {
			t.Errorf("args %v without %s", a, want)
		}
	}
	if get(c, "env", 0, "name") != "RATELIMITD_REDIS_PASSWORD" || get(c, "env", 0, "valueFrom", "secretKeyRef", "name") != "redis-auth" {
		t.Errorf("env %v; want the password from the Secret", c["env"])
	}
	if sm := ms["ServiceMonitor/edge-ratelimitd"]; sm == nil || get(sm, "spec", "endpoints", 0, "port") != "admin" {
		t.Errorf("ServiceMonitor %v", sm)
	}
	if s := ms["Service/edge-ratelimitd-admin"]; s == nil || get(s, "spec", "ports", 0, "port") != float64(9090) {
		t.Errorf("admin Service %v", s)
	}
}

// TestStateVolume: the memory store's buckets on a claim, the Deployment
// replaced (never two pods on one state file); refused with Redis.
func TestStateVolume(t *testing.T) {
	ms := render(t, map[string]any{"stateVolume": map[string]any{"enabled": true}})
	c := container(t, ms)
	checkArgs(t, args(c))
	if !contains(args(c), "--state-file=/var/lib/ratelimitd/buckets.state") || ms["PersistentVolumeClaim/edge-ratelimitd-state"] == nil {
		t.Errorf("args %v, manifests %v", args(c), keys(ms))
	}
	if get(ms["Deployment/edge-ratelimitd"], "spec", "strategy", "type") != "Recreate" {
		t.Error("a state volume without the Recreate strategy")
	}
	ch, _ := loader.Load("ratelimitd")
	vals, _ := chartutil.ToRenderValues(ch, map[string]any{"store": "redis", "redis": map[string]any{"addr": "r:6379"}, "stateVolume": map[string]any{"enabled": true}},
		chartutil.ReleaseOptions{Name: "edge"}, chartutil.DefaultCapabilities)
	if _, err := engine.Render(ch, vals); err == nil || !strings.Contains(err.Error(), "stateVolume") {
		t.Errorf("a state volume with Redis: %v, want refused", err)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestOperationsCommand: docs/operations.md's helm install command, its
// --set values parsed by Helm's own parser, renders a chart whose flags
// the binary takes.
func TestOperationsCommand(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^helm install (\S+) (\S+) (.*)$`).FindStringSubmatch(string(doc))
	if m == nil {
		t.Fatal("docs/operations.md has no helm install command")
	}
	if m[2] != "deploy/helm/ratelimitd" {
		t.Errorf("the command installs %s, not deploy/helm/ratelimitd", m[2])
	}
	values := map[string]any{}
	words := strings.Fields(m[3])
	for i := 0; i < len(words); i++ {
		if words[i] != "--set" || i+1 == len(words) {
			t.Fatalf("helm install ... %s: want --set key=value pairs", strings.Join(words[i:], " "))
		}
		i++
		if err := strvals.ParseInto(words[i], values); err != nil {
			t.Fatal(err)
		}
	}
	ms := render(t, values)
	a := args(container(t, ms))
	checkArgs(t, a)
	if !contains(a, "--store=redis") || ms["ServiceMonitor/edge-ratelimitd"] == nil {
		t.Errorf("args %v, manifests %v", a, keys(ms))
	}
}

// TestSentinel: the master's name and the sentinels' addresses, and both
// passwords from Secrets.
func TestSentinel(t *testing.T) {
	ms := render(t, map[string]any{
		"store": "redis",
		"redis": map[string]any{"addr": "s1:26379,s2:26379,s3:26379", "sentinel": map[string]any{"master": "mymaster", "passwordSecret": map[string]any{"name": "sentinel-auth"}},
			"passwordSecret": map[string]any{"name": "redis-auth"}},
	})
	c := container(t, ms)
	a := args(c)
	checkArgs(t, a)
	if !contains(a, "--redis-sentinel=mymaster") || !contains(a, "--redis-addr=s1:26379,s2:26379,s3:26379") {
		t.Errorf("args %v", a)
	}
	env := map[string]any{}
	for i := 0; get(c, "env", i) != nil; i++ {
		env[get(c, "env", i, "name").(string)] = get(c, "env", i, "valueFrom", "secretKeyRef", "name")
	}
	if env["RATELIMITD_REDIS_PASSWORD"] != "redis-auth" || env["RATELIMITD_REDIS_SENTINEL_PASSWORD"] != "sentinel-auth" {
		t.Errorf("env %v; want both passwords from their Secrets", c["env"])
	}
}

// TestRenderCommand: docs/operations.md's command that renders the chart
// without helm prints manifests that decode strictly, with its values.
func TestRenderCommand(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^cd deploy/helm && go run \./render (.*)$`).FindStringSubmatch(string(doc))
	if m == nil {
		t.Fatal("docs/operations.md has no `cd deploy/helm && go run ./render` command")
	}
	out, err := exec.Command("go", append([]string{"run", "./render"}, strings.Fields(m[1])...)...).Output()
	if err != nil {
		t.Fatalf("go run ./render %s: %v", m[1], err)
	}
	kinds := map[string]bool{}
	for _, doc := range strings.Split(string(out), "---\n") {
		var obj struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
			Spec     struct {
				Template struct {
					Spec struct {
						Containers []struct{ Args []string }
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("render's output does not parse: %v\n%s", err, doc)
		}
		kinds[obj.Kind] = true
		if obj.Kind == "Deployment" {
			a := obj.Spec.Template.Spec.Containers[0].Args
			checkArgs(t, a)
			if !contains(a, "--store=redis") || !contains(a, "--redis-addr=redis.limits:6379") {
				t.Errorf("rendered args %v: not the command's values", a)
			}
		}
	}
	for _, k := range []string{"Deployment", "Service", "ConfigMap", "ServiceAccount", "PodDisruptionBudget"} {
		if !kinds[k] {
			t.Errorf("render printed no %s (printed %v)", k, kinds)
		}
	}
}
