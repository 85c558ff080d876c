package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// get fetches path from addr with Host host ("" for addr), returning the
// status code.
func get(t *testing.T, addr, host, path string) int {
	t.Helper()
	r, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		r.Host = host
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestAdminAddr: with an admin address, the operator's surface is served
// there and not on the HTTP port, which serves the decision APIs and the
// probes only; without one, both are on the HTTP port.
func TestAdminAddr(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) { c.AdminAddr = "127.0.0.1:0"; c.Pprof = true })
	if d.AdminAddr() == d.HTTPAddr() {
		t.Fatal("the admin address is the HTTP port's")
	}
	admin := []string{"/metrics", "/policies", "/console", "/console/api/top", "/console/api/inspect?domain=default&entry=path=/x", "/debug/pprof/"}
	probes := []string{"/healthz", "/readyz"}
	for _, p := range admin {
		if code := get(t, d.HTTPAddr(), "", p); code != http.StatusNotFound {
			t.Errorf("HTTP port %s: %d, want 404", p, code)
		}
		if code := get(t, d.AdminAddr(), "", p); code != http.StatusOK {
			t.Errorf("admin %s: %d, want 200", p, code)
		}
	}
	for _, p := range probes {
		if code := get(t, d.HTTPAddr(), "", p); code != http.StatusOK {
			t.Errorf("HTTP port %s: %d, want 200", p, code)
		}
	}
	body := `{"domain":"default","descriptors":[{"entries":[{"key":"path","value":"/orders"}]}]}`
	for _, tc := range []struct {
		addr string
		want int
	}{{d.HTTPAddr(), http.StatusOK}, {d.AdminAddr(), http.StatusNotFound}} {
		resp, err := http.Post("http://"+tc.addr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("/json on %s: %d, want %d", tc.addr, resp.StatusCode, tc.want)
		}
	}

	same := daemontest.Start(t, "")
	if same.AdminAddr() != same.HTTPAddr() {
		t.Fatal("without an admin address, the admin surface is elsewhere")
	}
	for _, p := range append(admin[:2], probes...) {
		if code := get(t, same.HTTPAddr(), "", p); code != http.StatusOK {
			t.Errorf("without an admin address, %s: %d, want 200", p, code)
		}
	}
}

// TestAuthzNeedsAdminAddr: an authorization policy does not cover the
// operator's surface, so the daemon refuses to serve it beside the
// authorized APIs: it does not start without an admin address.
func TestAuthzNeedsAdminAddr(t *testing.T) {
	path := t.TempDir() + "/authz.yaml"
	writeFile(t, path, "clients:\n  - name: a\n    match: [{common_name: a}]\n    grants: [{domains: [a], access: charge}]\n")
	d, err := daemon.Start(daemon.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AuthzPolicy: path})
	if err == nil {
		d.Shutdown(t.Context())
		t.Fatal("started")
	}
	if !strings.Contains(err.Error(), "--admin-addr") {
		t.Errorf("error %q does not name --admin-addr", err)
	}
}

// TestHostChecked: both HTTP ports answer requests for their own names
// (IP addresses, localhost, the allowed hosts) and refuse others (421), so
// that a page cannot reach them by DNS rebinding.
func TestHostChecked(t *testing.T) {
	d := daemontest.Start(t, "", func(c *daemon.Config) {
		c.AdminAddr = "127.0.0.1:0"
		c.AllowedHosts = []string{"ratelimit.internal"}
	})
	for _, tc := range []struct {
		host string
		want int
	}{
		{"", http.StatusOK},
		{"localhost:8080", http.StatusOK},
		{"ratelimit.internal", http.StatusOK},
		{"attacker.example:8080", http.StatusMisdirectedRequest},
	} {
		for _, target := range []struct{ addr, path string }{{d.HTTPAddr(), "/readyz"}, {d.AdminAddr(), "/policies"}} {
			if code := get(t, target.addr, tc.host, target.path); code != tc.want {
				t.Errorf("%s with Host %q: %d, want %d", target.path, tc.host, code, tc.want)
			}
		}
	}
}
