package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSimulateOneAtATime: while a simulation runs, another is answered
// 429; a simulation whose request is cancelled stops (503).
func TestSimulateOneAtATime(t *testing.T) {
	c := New(Options{})
	const body = `{"alg": "token_bucket", "requests": "10", "period": "1m", "pattern": "steady", "rate": "1000", "duration": "15m"}`
	post := func(ctx context.Context) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, "POST", "/console/api/simulate", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		c.simulate(w, r)
		return w
	}
	c.simulator <- struct{}{} // one running
	if w := post(context.Background()); w.Code != http.StatusTooManyRequests {
		t.Errorf("while another runs: %d %s, want 429", w.Code, w.Body)
	}
	<-c.simulator
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w := post(ctx); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "stopped (context canceled)") {
		t.Errorf("cancelled: %d %s, want it stopped with the cancellation", w.Code, w.Body)
	}
	if w := post(context.Background()); w.Code != http.StatusOK {
		t.Errorf("after: %d %s, want 200", w.Code, w.Body)
	}
}
