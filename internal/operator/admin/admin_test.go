package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/operator/admin"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func TestPolicies(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	tests := []struct {
		name, path, wantConfig string
	}{
		{"embedded", "", "embedded default"},
		{"from a file", "/etc/ratelimitd", "/etc/ratelimitd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mux := http.NewServeMux()
			admin.Register(mux, admin.Options{Policy: func() admin.Loaded {
				return admin.Loaded{Policy: config.Default(), Path: tt.path, At: at}
			}})
			rec := get(mux, "/policies")
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s", rec.Code, rec.Header().Get("Content-Type"))
			}
			var got struct {
				Config   string `json:"config"`
				LoadedAt string `json:"loaded_at"`
				Domains  []struct {
					Domain, Source string
					Descriptors    []struct{ Key string }
				} `json:"domains"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Config != tt.wantConfig || got.LoadedAt != "2026-01-02T02:04:05Z" ||
				len(got.Domains) != 1 || got.Domains[0].Domain != "default" || got.Domains[0].Source != "embedded:default.yaml" ||
				len(got.Domains[0].Descriptors) != 2 {
				t.Fatalf("got %+v\n%s", got, rec.Body)
			}
		})
	}
}

func TestPprof(t *testing.T) {
	for _, on := range []bool{true, false} {
		mux := http.NewServeMux()
		admin.Register(mux, admin.Options{Pprof: on, Policy: func() admin.Loaded { return admin.Loaded{Policy: config.Default()} }})
		rec := get(mux, "/debug/pprof/")
		if on && (rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine")) {
			t.Errorf("pprof on: %d", rec.Code)
		}
		if !on && rec.Code != http.StatusNotFound {
			t.Errorf("pprof off: %d, want 404", rec.Code)
		}
		if rec := get(mux, "/debug/pprof/heap?debug=1"); on != (rec.Code == http.StatusOK) {
			t.Errorf("pprof on=%v: heap %d", on, rec.Code)
		}
		// The command line may carry secrets: never served.
		rec = get(mux, "/debug/pprof/cmdline")
		if rec.Code != http.StatusNotFound || strings.Contains(rec.Body.String(), os.Args[0]) {
			t.Errorf("pprof on=%v: cmdline %d %q, want 404 without the command line", on, rec.Code, rec.Body)
		}
	}
}
