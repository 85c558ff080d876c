package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

func TestServiceIsLimited(t *testing.T) {
	d := daemontest.Start(t, "") // a fake clock: remaining counts do not refill mid-test
	c, err := client.New(d.GRPCAddr(), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv := httptest.NewServer(newHandler(c, "default"))
	t.Cleanup(srv.Close)

	// The headers describe the most restrictive tier: alice's on the route,
	// 800 at once, an empty bucket full again in 80s.
	const policy = `"per-user-per-endpoint";q=800;w=80`
	tests := []struct {
		path          string
		wantBody      string
		wantPolicy    string
		wantRateLimit string
	}{
		{"/orders", "[{\"id\": 1}, {\"id\": 2}]\n", policy, `"per-user-per-endpoint";r=799;t=1`},
		{"/orders/7", "{\"id\": \"7\"}\n", policy, `"per-user-per-endpoint";r=799;t=1`},
		{"/healthz", "ok\n", "", ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", srv.URL+tt.path, nil)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != tt.wantBody {
			t.Errorf("%s: %d %q, want 200 %q", tt.path, resp.StatusCode, body, tt.wantBody)
		}
		if p, rl := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"); p != tt.wantPolicy || rl != tt.wantRateLimit {
			t.Errorf("%s: RateLimit-Policy %q RateLimit %q, want %q %q", tt.path, p, rl, tt.wantPolicy, tt.wantRateLimit)
		}
	}
}

// TestReportsInFlight: with a concurrency rule for reports, a report
// requested while the only unit is held elsewhere is answered 429, and
// served once it is released.
func TestReportsInFlight(t *testing.T) {
	d := daemontest.Start(t, `
domain: default
descriptors:
  - key: in_flight
    value: reports
    rate_limit: {name: reports-in-flight, algorithm: concurrency, max_in_flight: 1, lease: 5m}
`)
	c, err := client.New(d.GRPCAddr(), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv := httptest.NewServer(newHandler(c, "default"))
	t.Cleanup(srv.Close)
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/reports")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if code, body := get(); code != 200 || body != "{\"report\": \"orders by day\"}\n" {
		t.Fatalf("a report: %d %q", code, body)
	}
	// Another instance of the service holds the unit.
	ctx := context.Background()
	other, err := c.Acquire(ctx, "default", client.NewDescriptor("in_flight", "reports"))
	if err != nil || !other.Allowed {
		t.Fatalf("taking the unit after a report: %v, %v (its release did not land?)", other, err)
	}
	if code, body := get(); code != 429 || body != "throttled by policy 'reports-in-flight'; retry after 310 s\n" {
		t.Fatalf("a report while the unit is held: %d %q, want 429", code, body)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(); code != 200 {
		t.Fatalf("a report after the release: %d", code)
	}
}
