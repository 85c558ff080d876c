package main

import (
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
