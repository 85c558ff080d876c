package helm

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// objects is a rendered chart decoded strictly into Kubernetes' own types.
type objects struct {
	deployment     *appsv1.Deployment
	services       map[string]*corev1.Service
	configMaps     map[string]*corev1.ConfigMap
	serviceAccount *corev1.ServiceAccount
	claim          *corev1.PersistentVolumeClaim
	budget         *policyv1.PodDisruptionBudget
	monitor        *serviceMonitor
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart renders (its type is not in k8s.io/api); decoding strictly
// into it refuses any other field.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// renderStrict renders the chart with values and decodes every object into
// its k8s.io/api type, refusing unknown and duplicate fields (what the API
// server's strict field validation refuses).
func renderStrict(t *testing.T, values map[string]any) *objects {
	t.Helper()
	files := renderFiles(t, values)
	o := &objects{services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}}
	for name, text := range files {
		for _, doc := range strings.Split(text, "\n---\n") {
			var head struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var into any
			keep := func() {}
			switch head.Kind {
			case "":
				continue
			case "Deployment":
				o.deployment = &appsv1.Deployment{}
				into = o.deployment
			case "Service":
				s := &corev1.Service{}
				into, keep = s, func() { o.services[s.Name] = s }
			case "ConfigMap":
				c := &corev1.ConfigMap{}
				into, keep = c, func() { o.configMaps[c.Name] = c }
			case "ServiceAccount":
				o.serviceAccount = &corev1.ServiceAccount{}
				into = o.serviceAccount
			case "PersistentVolumeClaim":
				o.claim = &corev1.PersistentVolumeClaim{}
				into = o.claim
			case "PodDisruptionBudget":
				o.budget = &policyv1.PodDisruptionBudget{}
				into = o.budget
			case "ServiceMonitor":
				o.monitor = &serviceMonitor{}
				into = o.monitor
			default:
				t.Fatalf("%s renders a %s, which no test decodes", name, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s: not a valid %s: %v\n%s", name, head.Kind, err, doc)
			}
			keep()
		}
	}
	if o.deployment == nil {
		t.Fatal("no Deployment rendered")
	}
	return o
}

// renderFiles renders the chart's templates as helm template does.
func renderFiles(t *testing.T, values map[string]any) map[string]string {
	t.Helper()
	files, err := renderErr(values)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func renderErr(values map[string]any) (map[string]string, error) {
	ch, err := loader.Load("ratelimitd")
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "edge", Namespace: "limits", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	for name := range out {
		if !strings.HasSuffix(name, ".yaml") {
			delete(out, name)
		}
	}
	return out, nil
}

// valueSets are the values files the tests render: each a way the chart is
// deployed.
var valueSets = map[string]map[string]any{
	"defaults":     nil,
	"state volume": {"stateVolume": map[string]any{"enabled": true, "storageClassName": "fast"}},
	"redis, three replicas, everything from Secrets": {
		"store": "redis", "replicaCount": 3,
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"redis": map[string]any{"addr": "redis.limits:6379", "username": "ratelimitd", "keyPrefix": "edge:", "timeout": "100ms",
			"passwordSecret": map[string]any{"name": "redis-auth"},
			"tlsSecret":      map[string]any{"name": "redis-tls", "certKey": "tls.crt", "keyKey": "tls.key"}},
		"grpcTLS":           map[string]any{"secretName": "ratelimitd-tls", "clientCAKey": "ca.crt"},
		"authz":             map[string]any{"secretName": "ratelimitd-authz"},
		"allowedHosts":      []any{"limits.example.com"},
		"serviceMonitor":    map[string]any{"enabled": true},
		"extraArgs":         []any{"--shadow-mode"},
		"extraEnv":          []any{map[string]any{"name": "GOMAXPROCS", "value": "2"}},
		"extraVolumes":      []any{map[string]any{"name": "xds-ca", "configMap": map[string]any{"name": "xds-ca"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "xds-ca", "mountPath": "/etc/xds-ca", "readOnly": true}},
	},
	"sentinel, own spread": {
		"store": "redis", "replicaCount": 2,
		"redis":                     map[string]any{"addr": "s1:26379,s2:26379", "sentinel": map[string]any{"master": "mymaster"}},
		"topologySpreadConstraints": []any{map[string]any{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": map[string]any{"matchLabels": map[string]any{"app": "x"}}}},
		"serviceAccount":            map[string]any{"create": false, "name": "shared"},
	},
}

// TestRestrictedPodSecurity: every way of deploying renders objects the API
// server takes (strictly decoded), a pod the restricted Pod Security
// Standard admits, and a service account with no token.
func TestRestrictedPodSecurity(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			o := renderStrict(t, values)
			pod := o.deployment.Spec.Template.Spec
			for _, p := range restrictedViolations(pod) {
				t.Error(p)
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("the pod mounts a service account token; the daemon never calls the API")
			}
			if pod.SecurityContext.FSGroup == nil || *pod.SecurityContext.FSGroup != 65532 {
				t.Errorf("fsGroup %v, want 65532 (the state volume writable by the daemon's group)", pod.SecurityContext.FSGroup)
			}
			if o.serviceAccount != nil {
				if pod.ServiceAccountName != o.serviceAccount.Name {
					t.Errorf("the pod runs as %q, the chart creates %q", pod.ServiceAccountName, o.serviceAccount.Name)
				}
				if a := o.serviceAccount.AutomountServiceAccountToken; a == nil || *a {
					t.Error("the ServiceAccount lets its token be mounted")
				}
			}
			// Every mount names a volume of the pod, and every file a flag names
			// lies under a mount.
			c := pod.Containers[0]
			vols := map[string]bool{}
			for _, v := range pod.Volumes {
				vols[v.Name] = true
			}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("mount %s of volume %q: no such volume", m.MountPath, m.Name)
				}
			}
			for _, a := range c.Args {
				_, v, ok := strings.Cut(a, "=")
				if !ok || !strings.HasPrefix(v, "/") {
					continue
				}
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(v, m.MountPath+"/") }) {
					t.Errorf("%s names a file under no mount (the root filesystem is read-only and empty)", a)
				}
			}
			checkArgs(t, c.Args)
		})
	}
}

// restrictedViolations lists what the restricted Pod Security Standard
// (kubernetes.io/docs/concepts/security/pod-security-standards) refuses in
// pod.
func restrictedViolations(pod corev1.PodSpec) []string {
	var out []string
	psc := pod.SecurityContext
	if psc == nil {
		return []string{"no pod securityContext"}
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		out = append(out, "seccompProfile is not RuntimeDefault")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil {
			out = append(out, c.Name+": no securityContext")
			continue
		}
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
		if !nonRoot {
			out = append(out, c.Name+": runAsNonRoot is not true")
		}
		if u := psc.RunAsUser; u == nil || *u == 0 {
			out = append(out, c.Name+": runs as root")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			out = append(out, c.Name+": allowPrivilegeEscalation is not false")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			out = append(out, c.Name+": capabilities: not drop [ALL], add nothing")
		}
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, c.Name+": privileged")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			out = append(out, c.Name+": the root filesystem is writable")
		}
	}
	return out
}

// TestReplicas: with more than one replica, a PodDisruptionBudget and a
// preferred spread over nodes and zones; with one, neither (a budget of one
// pod would block every node drain).
func TestReplicas(t *testing.T) {
	one := renderStrict(t, nil)
	if one.budget != nil || len(one.deployment.Spec.Template.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("one replica: budget %v, spread %v", one.budget, one.deployment.Spec.Template.Spec.TopologySpreadConstraints)
	}
	three := renderStrict(t, valueSets["redis, three replicas, everything from Secrets"])
	if three.budget == nil || three.budget.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("three replicas: budget %+v, want maxUnavailable 1", three.budget)
	}
	if !labelsMatch(three.budget.Spec.Selector.MatchLabels, three.deployment.Spec.Template.Labels) {
		t.Errorf("the budget selects %v, the pods are labelled %v", three.budget.Spec.Selector.MatchLabels, three.deployment.Spec.Template.Labels)
	}
	var keys []string
	for _, c := range three.deployment.Spec.Template.Spec.TopologySpreadConstraints {
		keys = append(keys, c.TopologyKey)
		if c.WhenUnsatisfiable != corev1.ScheduleAnyway || !labelsMatch(c.LabelSelector.MatchLabels, three.deployment.Spec.Template.Labels) {
			t.Errorf("spread %+v: want ScheduleAnyway over the chart's pods", c)
		}
	}
	if !slices.Equal(keys, []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"}) {
		t.Errorf("spread over %v", keys)
	}
	own := renderStrict(t, valueSets["sentinel, own spread"])
	if s := own.deployment.Spec.Template.Spec.TopologySpreadConstraints; len(s) != 1 || s[0].MaxSkew != 2 {
		t.Errorf("topologySpreadConstraints of the values replaced by %+v", s)
	}
	if own.serviceAccount != nil || own.deployment.Spec.Template.Spec.ServiceAccountName != "shared" {
		t.Errorf("serviceAccount.create false: rendered %v, pod runs as %q", own.serviceAccount, own.deployment.Spec.Template.Spec.ServiceAccountName)
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// TestResourcesCoverMaxMemory: the memory request holds maxMemory of
// buckets, and the limit is at least Go's soft limit (maxMemory + 192 MiB),
// so the collector works before the kernel kills the pod.
func TestResourcesCoverMaxMemory(t *testing.T) {
	for _, maxMemory := range []string{"", "64MiB", "1GiB"} {
		values := map[string]any{}
		if maxMemory != "" {
			values["maxMemory"] = maxMemory
			q := resource.MustParse(strings.TrimSuffix(maxMemory, "B"))
			q.Add(resource.MustParse("256Mi"))
			values["resources"] = map[string]any{"requests": map[string]any{"memory": q.String()}, "limits": map[string]any{"memory": q.String()}}
		}
		o := renderStrict(t, values)
		c := o.deployment.Spec.Template.Spec.Containers[0]
		var flag string
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--max-memory="); ok {
				flag = v
			}
		}
		buckets := resource.MustParse(strings.TrimSuffix(flag, "B"))
		soft := buckets.DeepCopy()
		soft.Add(resource.MustParse("192Mi"))
		req, lim := c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory]
		if req.Cmp(buckets) < 0 {
			t.Errorf("maxMemory %s: memory request %s below it", flag, req.String())
		}
		if lim.Cmp(soft) < 0 {
			t.Errorf("maxMemory %s: memory limit %s below Go's soft limit %s", flag, lim.String(), soft.String())
		}
	}
}

// TestRefusedValues: values that cannot work are refused at render time,
// naming the value.
func TestRefusedValues(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"store": "redis", "redis": map[string]any{"addr": "r:6379"}, "stateVolume": map[string]any{"enabled": true}}, "stateVolume"},
		{map[string]any{"replicaCount": 2, "stateVolume": map[string]any{"enabled": true}}, "stateVolume"},
		{map[string]any{"store": "redis"}, "redis.addr"},
		{map[string]any{"store": "etcd"}, "store"},
		{map[string]any{"store": "redis", "redis": map[string]any{"addr": "r:6379", "tlsSecret": map[string]any{"name": "t", "certKey": "tls.crt"}}}, "redis.tlsSecret"},
	} {
		_, err := renderErr(tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.values, err, tc.want)
		}
	}
}

// TestAllowedHosts: the HTTP port answers to the Service's DNS names (so
// the JSON API through the Service is not refused with 421), then the
// values' own.
func TestAllowedHosts(t *testing.T) {
	o := renderStrict(t, map[string]any{"allowedHosts": []any{"limits.example.com"}})
	var got string
	for _, a := range o.deployment.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--allowed-hosts="); ok {
			got = v
		}
	}
	svc := o.services["edge-ratelimitd"]
	if svc == nil {
		t.Fatal("no Service edge-ratelimitd")
	}
	want := []string{svc.Name, svc.Name + ".limits", svc.Name + ".limits.svc", svc.Name + ".limits.svc.cluster.local", "limits.example.com"}
	if got != strings.Join(want, ",") {
		t.Errorf("--allowed-hosts=%s, want %s", got, strings.Join(want, ","))
	}
}
