package hostcheck_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/transport/hostcheck"
)

func TestAllows(t *testing.T) {
	h := hostcheck.New("ratelimit.internal", "Svc.Example.")
	for host, want := range map[string]bool{
		"127.0.0.1:8080":          true,
		"[::1]:8080":              true,
		"10.2.3.4":                true,
		"localhost:8080":          true,
		"LOCALHOST":               true,
		"console.localhost:8080":  true,
		"ratelimit.internal:8080": true,
		"svc.example":             true,
		"svc.example.:80":         true,
		"attacker.example:8080":   false,
		"ratelimit.internal.evil": false,
		"localhost.attacker.com":  false,
		"":                        false,
		"127.0.0.1.nip.io:8080":   false,
	} {
		if got := h.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	if !hostcheck.New("*").Allows("anything.example") {
		t.Error(`"*" does not allow any host`)
	}
}

// TestHandler: a request for a Host the server does not answer to (DNS
// rebinding) is 421; a cross-origin POST from a browser is 403; a program's
// POST (no Origin, no Sec-Fetch-Site) and a same-origin one go through.
func TestHandler(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	h := hostcheck.New().Handler(ok)
	tests := []struct {
		name, method, host string
		header             map[string]string
		want               int
	}{
		{"rebound name", "GET", "attacker.example:8080", nil, http.StatusMisdirectedRequest},
		{"loopback GET", "GET", "127.0.0.1:8080", nil, http.StatusOK},
		{"program POST", "POST", "127.0.0.1:8080", nil, http.StatusOK},
		{"cross-site POST", "POST", "127.0.0.1:8080", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://attacker.example"}, http.StatusForbidden},
		{"cross-origin POST, old browser", "POST", "127.0.0.1:8080", map[string]string{"Origin": "https://attacker.example"}, http.StatusForbidden},
		{"same-origin POST", "POST", "localhost:8080", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:8080"}, http.StatusOK},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "/x", strings.NewReader("{}"))
		r.Host = tt.host
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, w.Code, w.Body, tt.want)
		}
	}
}
