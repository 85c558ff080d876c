package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/api/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcapi"
	"github.com/ratelimitd/ratelimitd/internal/api/httpapi"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// FuzzJSON posts arbitrary bodies to every path the Server serves: it must
// never panic, and must answer JSON — a decision (200, or 429 on /json) or
// an error with a code and a message. Run longer with
//
//	go test -run '^$' -fuzz '^FuzzJSON$' -fuzztime 60s ./internal/api/httpapi/
func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		orders,
		`{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/orders"}],"hits":0,"limit":{"algorithm":"ALGORITHM_TOKEN_BUCKET","requests":5,"period":"1.5s","burst":9}}],"hits":"3"}`,
		`{"domain":"shop","hitsAddend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":0,"limit":{"requestsPerUnit":3,"unit":"HOUR","unitMultiplier":2}}]}`,
		`{"domain":"","descriptors":[]}`,
		`{"domian":1}`,
		`[`,
		``,
		`{"domain":"\ud800"}`,
	} {
		f.Add(s)
	}
	p, err := config.Parse("policy.yaml", []byte(policy))
	if err != nil {
		f.Fatal(err)
	}
	e := engine.New(p, memory.New(clock.NewFake(t0)))
	mux := http.NewServeMux()
	api := httpapi.New(mux)
	grpcapi.Register(api, e)
	envoyapi.Register(api, e)
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{v1Path, v3Path, "/json"} {
			req := httptest.NewRequest("POST", path, strings.NewReader(body))
			req.Header.Set("Content-Type", jsonType)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			var answer map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
				t.Fatalf("%s: HTTP %d, not JSON: %v\n%s", path, rec.Code, err, rec.Body.Bytes())
			}
			switch rec.Code {
			case 200, 429:
				if _, ok := answer["overallCode"]; !ok {
					t.Fatalf("%s: HTTP %d without a decision: %s", path, rec.Code, rec.Body.Bytes())
				}
			default:
				if answer["code"] == "" || answer["message"] == "" || rec.Code < 400 {
					t.Fatalf("%s: HTTP %d, want an error body: %s", path, rec.Code, rec.Body.Bytes())
				}
			}
		}
	})
}
