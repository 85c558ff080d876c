package helm

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestRenderedPodRuns runs the real binary as the kubelet would run the
// rendered pod: its args and environment, each volume laid out under a
// scratch root the way the kubelet lays out ConfigMaps and Secrets (files
// behind a ..data symlink), the listen addresses moved to loopback ports.
// The daemon must come up ready, answer the Service's DNS name, refuse a
// foreign Host, and authorize the JSON API by the policy's token.
func TestRenderedPodRuns(t *testing.T) {
	token := "chart-test-token-0123456789abcdef"
	secrets := map[string]map[string]string{
		"ratelimitd-tls": serverTLS(t),
		"ratelimitd-authz": {
			"authz.yaml":   "clients:\n  - name: envoy\n    match: [{tokens: envoy.tokens}]\n    grants: [{domains: [default], access: charge}]\n",
			"envoy.tokens": token + "\n",
		},
	}
	o := renderStrict(t, map[string]any{
		"stateVolume":  map[string]any{"enabled": true},
		"grpcTLS":      map[string]any{"secretName": "ratelimitd-tls"},
		"authz":        map[string]any{"secretName": "ratelimitd-authz"},
		"allowedHosts": []any{"limits.example.com"},
		"extraEnv":     []any{map[string]any{"name": "GOGC", "value": "50"}},
		"extraArgs":    []any{"--snapshot-interval=1m"},
	})
	pod := o.deployment.Spec.Template.Spec
	c := pod.Containers[0]
	root := t.TempDir()
	mounts := map[string]string{} // volume name -> mount path
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range pod.Volumes {
		dir := filepath.Join(root, mounts[v.Name])
		switch {
		case v.ConfigMap != nil:
			cm := o.configMaps[v.ConfigMap.Name]
			if cm == nil {
				t.Fatalf("volume %s: no ConfigMap %s rendered", v.Name, v.ConfigMap.Name)
			}
			kubeletVolume(t, dir, cm.Data)
		case v.Secret != nil:
			data, ok := secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("volume %s: the test has no Secret %s", v.Name, v.Secret.SecretName)
			}
			kubeletVolume(t, dir, data)
		case v.PersistentVolumeClaim != nil:
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("volume %s: a kind the test cannot lay out", v.Name)
		}
	}

	ports := map[string]string{}
	var args []string
	for _, a := range c.Args {
		name, value, _ := strings.Cut(a, "=")
		switch {
		case name == "--grpc-addr" || name == "--http-addr" || name == "--admin-addr":
			ports[name] = freeAddr(t)
			a = name + "=" + ports[name]
		case strings.HasPrefix(value, "/"):
			a = name + "=" + filepath.Join(root, value)
		}
		args = append(args, a)
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Fatalf("env %s from %v: the test provides no such source", e.Name, e.ValueFrom)
		}
		env = append(env, e.Name+"="+e.Value)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = env
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("ratelimitd %s\n%s", strings.Join(args, " "), logs.String())
		}
	}()

	base := "http://" + ports["--http-addr"]
	service := "edge-ratelimitd.limits.svc.cluster.local:8080"
	waitReady(t, ctx, base+"/readyz", service)
	if code := get1(t, base+"/readyz", "attacker.example", ""); code != 421 {
		t.Errorf("/readyz with Host attacker.example: %d, want 421", code)
	}
	check := `{"domain": "default", "descriptors": [{"entries": [{"key": "generic_key", "value": "global"}]}]}`
	decide := base + "/ratelimit.v1.RateLimitService/ShouldRateLimit"
	if code := post(t, decide, service, token, check); code != 200 {
		t.Errorf("a decision with the policy's token through the Service's name: %d, want 200", code)
	}
	if code := post(t, decide, service, "", check); code != 401 {
		t.Errorf("a decision without a token: %d, want 401", code)
	}
	if code := get1(t, "http://"+ports["--admin-addr"]+"/metrics", "10.0.0.7:9090", ""); code != 200 {
		t.Errorf("/metrics on the admin port by pod IP: %d, want 200", code)
	}
}

// kubeletVolume lays out files as the kubelet does a ConfigMap or Secret
// volume: in a timestamped directory, behind a ..data symlink, each key a
// symlink through it.
func kubeletVolume(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	stamp := "..2026_11_28_08_00_00.000000001"
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, stamp, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// serverTLS is a kubernetes.io/tls Secret's data: a self-signed
// certificate for the Service's name.
func serverTLS(t *testing.T) map[string]string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "edge-ratelimitd"},
		DNSNames:     []string{"edge-ratelimitd.limits.svc"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		corev1.TLSCertKey:       string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		corev1.TLSPrivateKeyKey: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitReady polls url until it answers 200 or ctx ends.
func waitReady(t *testing.T, ctx context.Context, url, host string) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never answered 200 (last: %v)", url, fmt.Sprint(err))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func get1(t *testing.T, url, host, token string) int {
	t.Helper()
	return do(t, "GET", url, host, token, "")
}

func post(t *testing.T, url, host, token, body string) int {
	t.Helper()
	return do(t, "POST", url, host, token, body)
}

func do(t *testing.T, method, url, host, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
