package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/api/envoyapi"
	"github.com/ratelimitd/ratelimitd/internal/api/grpcapi"
	"github.com/ratelimitd/ratelimitd/internal/api/httpapi"
	"github.com/ratelimitd/ratelimitd/internal/core/clock"
	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics"
	"github.com/ratelimitd/ratelimitd/internal/observe/metrics/metricstest"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/store/memory"
)

// t0 is a whole minute since the epoch: minute windows start there.
var t0 = time.Unix(1_700_000_040, 0).UnixNano()

// policy allows 2 calls a minute on /orders, in a fixed window.
const policy = `
domain: shop
descriptors:
  - key: path
    value: /orders
    rate_limit: {unit: minute, requests_per_unit: 2, name: orders}
`

const (
	v1Path = "/ratelimit.v1.RateLimitService/ShouldRateLimit"
	v3Path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	// orders is the same JSON in both APIs.
	orders    = `{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/orders"}]}]}`
	ordersV3  = orders
	jsonType  = "application/json"
	noType    = ""
	maxBodyKB = 4
)

type harness struct {
	url     string
	metrics *metrics.Metrics
}

// start serves both APIs over real HTTP on loopback, on an engine with the
// memory store, a fake clock at t0, at most 2 descriptors a request, and
// the daemon's metrics (observer and interceptor) ahead of interceptors.
func start(t *testing.T, interceptors ...grpc.UnaryServerInterceptor) *harness {
	t.Helper()
	p, err := config.Parse("policy.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	bounds := engine.DefaultBounds
	bounds.MaxDescriptors = 2
	e := engine.New(p, memory.New(clock.NewFake(t0)), engine.WithBounds(bounds), engine.WithObserver(m.Observe))
	mux := http.NewServeMux()
	api := httpapi.New(mux,
		httpapi.WithInterceptors(append([]grpc.UnaryServerInterceptor{m.UnaryServerInterceptor()}, interceptors...)...),
		httpapi.WithMaxBodyBytes(maxBodyKB<<10))
	grpcapi.Register(api, e)
	envoyapi.Register(api, e)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &harness{url: srv.URL, metrics: m}
}

type answer struct {
	status      int
	contentType string
	body        string
}

func (h *harness) do(t *testing.T, method, path, contentType, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer t0ken")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

// check asserts the status and that the body is the JSON want, compared as
// values (key order and spacing aside).
func check(t *testing.T, name string, got answer, status int, want string) {
	t.Helper()
	if got.status != status {
		t.Errorf("%s: HTTP %d, want %d (body %s)", name, got.status, status, got.body)
	}
	if got.contentType != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", name, got.contentType)
	}
	var g, w any
	if err := json.Unmarshal([]byte(got.body), &g); err != nil {
		t.Errorf("%s: body is not JSON: %v\n%s", name, err, got.body)
		return
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: want is not JSON: %v", name, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", name, strings.TrimSpace(got.body), want)
	}
}

func TestV1(t *testing.T) {
	h := start(t)
	rule := `{"name":"orders","algorithm":"ALGORITHM_FIXED_WINDOW","requests":2,"period":"60s","burst":0,"unlimited":false}`
	check(t, "first", h.do(t, "POST", v1Path, jsonType, orders), 200, `{"overallCode":"CODE_OK","statuses":[
		{"code":"CODE_OK","matched":true,"remaining":"1","resetAfter":"60s","shadow":false,"overdrew":false,"debt":"0","chargedAt":"2023-11-14T22:14:00Z","rule":`+rule+`}],"mostRestrictive":1}`)
	check(t, "second", h.do(t, "POST", v1Path, "application/json; charset=utf-8", orders), 200, `{"overallCode":"CODE_OK","statuses":[
		{"code":"CODE_OK","matched":true,"remaining":"0","resetAfter":"60s","shadow":false,"overdrew":false,"debt":"0","chargedAt":"2023-11-14T22:14:00Z","rule":`+rule+`}],"mostRestrictive":1}`)
	// A denial is a decision: HTTP 200, the answer in the body.
	check(t, "denied", h.do(t, "POST", v1Path, jsonType, orders), 200, `{"overallCode":"CODE_OVER_LIMIT","retryAfter":"60s","statuses":[
		{"code":"CODE_OVER_LIMIT","matched":true,"remaining":"0","resetAfter":"60s","retryAfter":"60s","shadow":false,"overdrew":false,"debt":"0","chargedAt":"2023-11-14T22:14:00Z","rule":`+rule+`}],"mostRestrictive":1}`)
	// A charge that may overdraw is taken in full, into debt: counted,
	// though over the limit, and the status says it overdrew and how much
	// it owes: 2 + 3 in a window of 2.
	check(t, "overdrew", h.do(t, "POST", v1Path, jsonType,
		`{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/orders"}],"hits":3,"overdraft":"OVERDRAFT_ALWAYS"}]}`), 200,
		`{"overallCode":"CODE_OVER_LIMIT","retryAfter":"60s","statuses":[
		{"code":"CODE_OVER_LIMIT","matched":true,"remaining":"0","resetAfter":"60s","retryAfter":"60s","shadow":false,"overdrew":true,"debt":"3","chargedAt":"2023-11-14T22:14:00Z","rule":`+rule+`}],"mostRestrictive":1}`)
	// The proto's own field names decode too; hits 0 is a peek, which
	// reports the debt.
	check(t, "peek", h.do(t, "POST", v1Path, jsonType,
		`{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/orders"}],"hits":0}]}`), 200,
		`{"overallCode":"CODE_OK","statuses":[{"code":"CODE_OK","matched":true,"remaining":"0","resetAfter":"60s","shadow":false,"overdrew":false,"debt":"3","chargedAt":"2023-11-14T22:14:00Z","rule":`+rule+`}],"mostRestrictive":1}`)
	check(t, "unmatched", h.do(t, "POST", v1Path, jsonType,
		`{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/cart"}]}]}`), 200,
		`{"overallCode":"CODE_OK","statuses":[{"code":"CODE_OK","matched":false,"remaining":"0","shadow":false,"overdrew":false,"debt":"0"}],"mostRestrictive":0}`)
}

func TestEnvoyV3(t *testing.T) {
	h := start(t)
	limit := `"currentLimit":{"name":"orders","requestsPerUnit":2,"unit":"MINUTE"}`
	// Every scalar is written, zeros too: limitRemaining 0, the empty
	// header lists and raw body of v3.
	const empty = `"responseHeadersToAdd":[],"requestHeadersToAdd":[],"rawBody":""`
	check(t, "first", h.do(t, "POST", v3Path, jsonType, ordersV3), 200,
		`{"overallCode":"OK","statuses":[{"code":"OK",`+limit+`,"limitRemaining":1,"durationUntilReset":"60s"}],`+empty+`}`)
	h.do(t, "POST", v3Path, jsonType, ordersV3)
	check(t, "denied", h.do(t, "POST", v3Path, jsonType, ordersV3), 200,
		`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT",`+limit+`,"limitRemaining":0,"durationUntilReset":"60s"}],`+empty+`}`)
}

// /json answers as envoyproxy/ratelimit's: v3 in and out, 429 with the
// same body when over the limit; unlike upstream, only to a POST of
// application/json, which a page of another site cannot send without a
// preflight: a GET, a form or a text/plain body spends nothing.
func TestUpstreamJSON(t *testing.T) {
	h := start(t)
	limit := `"currentLimit":{"name":"orders","requestsPerUnit":2,"unit":"MINUTE"}`
	for _, ct := range []string{noType, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		want, _ := json.Marshal(map[string]string{"code": "invalid_argument", "message": "Content-Type: want application/json, got " + strconv.Quote(ct)})
		check(t, "refused "+ct, h.do(t, "POST", "/json", ct, ordersV3), 415, string(want))
	}
	if got := h.do(t, "GET", "/json", jsonType, ordersV3); got.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /json: %d %s, want 405", got.status, got.body)
	}
	check(t, "first", h.do(t, "POST", "/json", jsonType, ordersV3), 200,
		`{"overallCode":"OK","statuses":[{"code":"OK",`+limit+`,"limitRemaining":1,"durationUntilReset":"60s"}]}`)
	check(t, "second", h.do(t, "POST", "/json", "application/json; charset=utf-8", ordersV3), 200,
		`{"overallCode":"OK","statuses":[{"code":"OK",`+limit+`,"durationUntilReset":"60s"}]}`)
	check(t, "denied", h.do(t, "POST", "/json", jsonType, ordersV3), 429,
		`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT",`+limit+`,"durationUntilReset":"60s"}]}`)
	// Both Envoy paths share one bucket with v1: the same engine.
	check(t, "v1 after", h.do(t, "POST", v1Path, jsonType, orders), 200, `{"overallCode":"CODE_OVER_LIMIT","retryAfter":"60s","statuses":[
		{"code":"CODE_OVER_LIMIT","matched":true,"remaining":"0","resetAfter":"60s","retryAfter":"60s","shadow":false,"overdrew":false,"debt":"0","chargedAt":"2023-11-14T22:14:00Z",
		 "rule":{"name":"orders","algorithm":"ALGORITHM_FIXED_WINDOW","requests":2,"period":"60s","burst":0,"unlimited":false}}],"mostRestrictive":1}`)
}

func TestErrors(t *testing.T) {
	h := start(t)
	three := `{"domain":"shop","descriptors":[{"entries":[{"key":"a","value":"1"}]},{"entries":[{"key":"b","value":"2"}]},{"entries":[{"key":"c","value":"3"}]}]}`
	huge := `{"domain":"shop","descriptors":[{"entries":[{"key":"a","value":"` + strings.Repeat("x", maxBodyKB<<10) + `"}]}]}`
	for _, tc := range []struct {
		name, method, path, contentType, body string
		status                                int
		want                                  string
	}{
		{"empty domain", "POST", v1Path, jsonType, `{"descriptors":[{"entries":[{"key":"path","value":"/orders"}]}]}`,
			400, `{"code":"invalid_argument","message":"domain: must not be empty"}`},
		{"empty key", "POST", v3Path, jsonType, `{"domain":"shop","descriptors":[{"entries":[{"value":"x"}]}]}`,
			400, `{"code":"invalid_argument","message":"descriptors[0].entries[0].key: must not be empty"}`},
		{"bounds", "POST", v1Path, jsonType, three,
			400, `{"code":"invalid_argument","message":"descriptors: 3 descriptors; the limit is 2"}`},
		{"a check and a refund of one bucket", "POST", v3Path, jsonType, `{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/orders"}],"hitsAddend":"0"},{"entries":[{"key":"path","value":"/orders"}],"isNegativeHits":true}]}`,
			400, `{"code":"invalid_argument","message":"descriptors[1]: asks refund of the bucket that descriptors[0] asks check of; one request asks one operation of a bucket"}`},
		{"a refund that says it may overdraw", "POST", v1Path, jsonType, `{"domain":"shop","descriptors":[{"entries":[{"key":"path","value":"/orders"}],"operation":"OPERATION_REFUND","overdraft":"OVERDRAFT_ALWAYS"}]}`,
			400, `{"code":"invalid_argument","message":"descriptors[0].overdraft: is always, but the descriptor asks a refund: only a charge may overdraw"}`},
		{"json: empty domain", "POST", "/json", jsonType, `{"descriptors":[{"entries":[{"key":"path","value":"/orders"}]}]}`,
			400, `{"code":"invalid_argument","message":"domain: must not be empty"}`},
		{"too large", "POST", v1Path, jsonType, huge,
			413, `{"code":"resource_exhausted","message":"request body: larger than 4096 bytes"}`},
		{"json: too large", "POST", "/json", jsonType, huge,
			413, `{"code":"resource_exhausted","message":"request body: larger than 4096 bytes"}`},
		{"wrong content type", "POST", v1Path, "text/plain", orders,
			415, `{"code":"invalid_argument","message":"Content-Type: want application/json, got \"text/plain\""}`},
		{"no content type", "POST", v3Path, noType, orders,
			415, `{"code":"invalid_argument","message":"Content-Type: want application/json, got \"\""}`},
	} {
		check(t, tc.name, h.do(t, tc.method, tc.path, tc.contentType, tc.body), tc.status, tc.want)
	}

	// Bodies that are not the request message: the message is protojson's,
	// naming the field.
	for _, tc := range []struct{ name, path, body, mention string }{
		{"unknown field", v1Path, `{"domian":"shop"}`, `unknown field "domian"`},
		{"wrong type", v3Path, `{"domain":"shop","hitsAddend":"many"}`, `hitsAddend`},
		{"not JSON", v1Path, `domain=shop`, `invalid value`},
		{"empty", "/json", ``, `unexpected token`},
	} {
		got := h.do(t, "POST", tc.path, jsonType, tc.body)
		var e struct{ Code, Message string }
		if err := json.Unmarshal([]byte(got.body), &e); err != nil || got.status != 400 || e.Code != "invalid_argument" ||
			!strings.HasPrefix(e.Message, "request body: ") || !strings.Contains(e.Message, tc.mention) {
			t.Errorf("%s: HTTP %d %s, want 400 invalid_argument \"request body: ...%s...\"", tc.name, got.status, got.body, tc.mention)
		}
	}

	// Only POST on the methods' paths; nothing else is served.
	if got := h.do(t, "GET", v1Path, jsonType, ""); got.status != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: HTTP %d, want 405", v1Path, got.status)
	}
	if got := h.do(t, "POST", "/ratelimit.v1.RateLimitService/Nope", jsonType, orders); got.status != http.StatusNotFound {
		t.Errorf("unknown method: HTTP %d, want 404", got.status)
	}
}

// Interceptors see an HTTP call as a gRPC one: its method, its header fields
// as metadata, the client as peer; what they return is answered.
func TestInterceptors(t *testing.T) {
	var saw []string
	auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		p, _ := peer.FromContext(ctx)
		saw = append(saw, info.FullMethod+" "+strings.Join(md.Get("authorization"), ",")+" "+strings.Split(p.Addr.String(), ":")[0])
		if strings.Contains(string(mustJSON(t, req)), "forbidden") {
			return nil, status.Error(codes.PermissionDenied, "domain forbidden: not yours")
		}
		return handler(ctx, req)
	}
	h := start(t, auth)
	h.do(t, "POST", v1Path, jsonType, orders)
	h.do(t, "POST", "/json", jsonType, ordersV3)
	check(t, "denied by interceptor", h.do(t, "POST", v1Path, jsonType, `{"domain":"forbidden","descriptors":[{"entries":[{"key":"k"}]}]}`),
		403, `{"code":"permission_denied","message":"domain forbidden: not yours"}`)
	want := []string{
		v1Path + " Bearer t0ken 127.0.0.1",
		v3Path + " Bearer t0ken 127.0.0.1",
		v1Path + " Bearer t0ken 127.0.0.1",
	}
	if !reflect.DeepEqual(saw, want) {
		t.Errorf("the interceptor saw\n%q\nwant\n%q", saw, want)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// HTTP calls are counted where gRPC calls are: per-rule hits by the
// engine's observer, calls by the gRPC metrics interceptor under the
// method's service and name.
func TestMetrics(t *testing.T) {
	h := start(t)
	for range 3 {
		h.do(t, "POST", v1Path, jsonType, orders)
	}
	h.do(t, "POST", "/json", jsonType, ordersV3)
	h.do(t, "POST", v1Path, jsonType, `{"descriptors":[{"entries":[{"key":"k"}]}]}`)
	h.do(t, "POST", v1Path, jsonType, `{"domian":"x"}`) // counted as gRPC counts a message that does not decode

	rec := httptest.NewRecorder()
	h.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got := metricstest.Samples(t, bytes.NewReader(rec.Body.Bytes()))
	const v1 = `grpc_method="ShouldRateLimit",grpc_service="ratelimit.v1.RateLimitService",grpc_type="unary"`
	const v3 = `grpc_method="ShouldRateLimit",grpc_service="envoy.service.ratelimit.v3.RateLimitService",grpc_type="unary"`
	for series, v := range map[string]float64{
		`ratelimitd_rule_hits_total{descriptor="",domain="shop",rule="path_/orders"}`:              4,
		`ratelimitd_rule_within_limit_hits_total{descriptor="",domain="shop",rule="path_/orders"}`: 2,
		`ratelimitd_rule_over_limit_hits_total{descriptor="",domain="shop",rule="path_/orders"}`:   2,
		`ratelimitd_grpc_server_handled_total{grpc_code="OK",` + v1 + `}`:                          3,
		`ratelimitd_grpc_server_handled_total{grpc_code="InvalidArgument",` + v1 + `}`:             2,
		`ratelimitd_grpc_server_handled_total{grpc_code="OK",` + v3 + `}`:                          1,
		`ratelimitd_grpc_server_started_total{` + v1 + `}`:                                         5,
	} {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
}

func TestHTTPStatus(t *testing.T) {
	for c, want := range map[codes.Code]int{
		codes.OK: 200, codes.Canceled: 499, codes.Unknown: 500, codes.InvalidArgument: 400,
		codes.DeadlineExceeded: 504, codes.NotFound: 404, codes.AlreadyExists: 409,
		codes.PermissionDenied: 403, codes.ResourceExhausted: 429, codes.FailedPrecondition: 400,
		codes.Aborted: 409, codes.OutOfRange: 400, codes.Unimplemented: 501, codes.Internal: 500,
		codes.Unavailable: 503, codes.DataLoss: 500, codes.Unauthenticated: 401, codes.Code(99): 500,
	} {
		if got := httpapi.HTTPStatus(c); got != want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c, got, want)
		}
	}
}

func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.OK: "ok", codes.Canceled: "canceled", codes.InvalidArgument: "invalid_argument",
		codes.DeadlineExceeded: "deadline_exceeded", codes.Unavailable: "unavailable",
		codes.ResourceExhausted: "resource_exhausted", codes.Unauthenticated: "unauthenticated",
		codes.Code(99): "code_99",
	} {
		if got := httpapi.CodeName(c); got != want {
			t.Errorf("CodeName(%v) = %q, want %q", c, got, want)
		}
	}
}

// TestCheckDecoded: a body that does not decode is answered where
// CheckDecoded stands in the chain: the interceptors before it see the
// call, those after it do not.
func TestCheckDecoded(t *testing.T) {
	var before, after int
	count := func(n *int) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			*n++
			return handler(ctx, req)
		}
	}
	h := start(t, count(&before), httpapi.CheckDecoded, count(&after))
	got := h.do(t, "POST", v1Path, jsonType, `{"domain":"shop","descriptors":"many"}`)
	if got.status != 400 || !strings.Contains(got.body, `"message":"request body: proto:`) {
		t.Errorf("HTTP %d %s, want 400 request body: ...", got.status, got.body)
	}
	h.do(t, "POST", v1Path, jsonType, orders)
	if before != 2 || after != 1 {
		t.Errorf("before CheckDecoded %d calls, after %d; want 2 and 1", before, after)
	}
}
