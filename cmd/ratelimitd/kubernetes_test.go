package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// k8sObject is the part of a Kubernetes object the example's checks read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"` // ConfigMap
	Spec struct {
		Template struct { // Deployment
			Spec struct {
				TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
				Containers                    []container `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Ports []struct { // Service
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// TestKubernetesExample keeps examples/kubernetes/ratelimitd.yaml true:
// every document is valid YAML naming its apiVersion, kind and name; the
// ratelimitd container's flags all exist in --help and parse; the policy in
// the ConfigMap loads; the probes are /readyz and /healthz on the HTTP port
// the image listens on; the grace period outlasts the drain; the Service
// targets both ports.
func TestKubernetesExample(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../../examples/kubernetes/ratelimitd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(text))
	for {
		var raw yaml.Node
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("document %d: %v", len(objs)+1, err)
		}
		var o k8sObject
		if err := raw.Decode(&o); err != nil {
			t.Fatalf("document %d: %v", len(objs)+1, err)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Errorf("document %d has no apiVersion, kind or metadata.name", len(objs)+1)
		}
		objs = append(objs, o)
	}
	kinds := map[string]k8sObject{}
	for _, o := range objs {
		kinds[o.Kind] = o
	}
	for _, k := range []string{"ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"} {
		if _, ok := kinds[k]; !ok {
			t.Errorf("no %s in the example", k)
		}
	}

	// The policy in the ConfigMap loads as the daemon would load the mounted directory.
	dir := t.TempDir()
	for name, policy := range kinds["ConfigMap"].Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := config.Load(dir); err != nil {
		t.Errorf("the ConfigMap's policy does not load: %v", err)
	}

	known := map[string]bool{}
	for _, f := range helpFlags(t, 10) {
		known[f] = true
	}
	var c *container
	pod := kinds["Deployment"].Spec.Template.Spec
	for i := range pod.Containers {
		if pod.Containers[i].Name == "ratelimitd" {
			c = &pod.Containers[i]
		}
	}
	if c == nil {
		t.Fatal("no container named ratelimitd in the Deployment")
	}
	flags := map[string]string{}
	for _, a := range append(c.Command, c.Args...) {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[name] = value
		if !known[name] {
			t.Errorf("the example uses --%s, which ratelimitd --help does not list", name)
		}
	}
	// The values parse too: --version exits 0 only after every flag before it did.
	var stderr strings.Builder
	if code := run(append(append([]string{}, c.Args...), "--version"), io.Discard, &stderr); code != 0 {
		msg, _, _ := strings.Cut(stderr.String(), "\n") // the first line; the usage follows
		t.Errorf("ratelimitd %s --version: exit %d: %s", strings.Join(c.Args, " "), code, msg)
	}

	// The probes and ports match the addresses the image listens on.
	image, err := os.ReadFile("../../scripts/image")
	if err != nil {
		t.Fatal(err)
	}
	env := regexp.MustCompile(`ENV RATELIMITD_GRPC_ADDR=:(\d+) RATELIMITD_HTTP_ADDR=:(\d+)`).FindStringSubmatch(string(image))
	if env == nil {
		t.Fatal("scripts/image sets no RATELIMITD_GRPC_ADDR/RATELIMITD_HTTP_ADDR")
	}
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	if ports["grpc"] != env[1] || ports["http"] != env[2] {
		t.Errorf("container ports grpc=%s http=%s, want the image's %s and %s", ports["grpc"], ports["http"], env[1], env[2])
	}
	if p := c.ReadinessProbe.HTTPGet; p.Path != "/readyz" || p.Port != "http" {
		t.Errorf("readiness probe %+v, want /readyz on http", p)
	}
	if p := c.LivenessProbe.HTTPGet; p.Path != "/healthz" || p.Port != "http" {
		t.Errorf("liveness probe %+v, want /healthz on http", p)
	}
	for _, p := range kinds["Service"].Spec.Ports {
		if _, ok := ports[p.TargetPort]; !ok {
			t.Errorf("Service port %s targets %q, which the container does not name", p.Name, p.TargetPort)
		}
	}
	if len(kinds["Service"].Spec.Ports) != 2 {
		t.Errorf("the Service has %d ports, want both (grpc, http)", len(kinds["Service"].Spec.Ports))
	}

	// The pod is not killed before the drain can finish.
	drain := time.Duration(0)
	for _, f := range []string{"shutdown-delay", "shutdown-grace"} {
		d, err := time.ParseDuration(flags[f])
		if err != nil {
			t.Errorf("--%s=%q: %v (the example should set it)", f, flags[f], err)
		}
		drain += d
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace <= drain {
		t.Errorf("terminationGracePeriodSeconds %v, want more than --shutdown-delay + --shutdown-grace = %v", grace, drain)
	}
}
