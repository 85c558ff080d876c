// Package httpapi serves the decision APIs as JSON over HTTP,
// for callers that will not generate gRPC stubs: shell scripts, PHP,
// serverless functions, Lua in a proxy, curl.
//
// A Server is a grpc.ServiceRegistrar: the daemon registers on it the very
// service implementations it registers on its gRPC server (grpcapi.Register,
// envoyapi.Register), and each unary method is served at
//
//	POST /<package>.<Service>/<Method>
//
// — the gRPC method's own path, so that
// /ratelimit.v1.RateLimitService/ShouldRateLimit and
// /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit take the
// messages of the gRPC APIs in their JSON form (protojson: the proto3 JSON
// mapping: field names in lowerCamelCase or as in the proto, enums by name,
// durations as "1.5s", 64-bit integers as strings in answers and as strings
// or numbers in requests). The request is decoded
// with protojson, handed to the method's generated gRPC handler with the
// daemon's unary interceptors (so metrics, and whatever an embedding program
// adds, see the call as they see a gRPC one), and the response encoded with
// protojson.
//
// # Why protojson and not connect-go
//
// The Connect protocol (connectrpc.com/connect) would serve the same paths
// and add gRPC-Web for browsers, but it serves only services whose Go code is
// generated with its plugin from protos in this module. Envoy's v3 service is
// not: it comes compiled from github.com/envoyproxy/go-control-plane, so the
// Envoy API and upstream's /json would still need the adapter written here.
// One adapter for both APIs, on the protobuf runtime the daemon already has,
// calling the generated gRPC handlers themselves, keeps one path for every
// call and adds no code generator. The paths, the error body below and the
// status table follow Connect's unary JSON conventions.
//
// # Answers
//
// On the methods' paths the decision is the body, with HTTP 200 whatever the
// decision: a request over its limit is a successful call whose answer is
// "no" (overallCode OVER_LIMIT / CODE_OVER_LIMIT). Every scalar field is
// written, zeros too ("remaining": "0", "shadow": false), so that a caller
// need not know proto3's defaults; an absent message field (a duration, a
// rule) is omitted. The request must be Content-Type application/json (else
// 415: a browser page cannot send one cross-origin without a preflight,
// which is never answered).
//
// When the Envoy v3 service is registered, /json serves it as
// envoyproxy/ratelimit's /json endpoint does, for tooling written for it:
// the v3 request and response in protojson, HTTP 200 for OK and 429 Too Many
// Requests, with the same JSON body, for OVER_LIMIT; fields at their zero
// value are omitted there ("limitRemaining" is absent when 0), as upstream
// writes them. Unlike upstream, which takes any method and content type,
// /json takes only a POST of application/json (else 405 or 415), as the
// methods' paths do: a form, a text/plain fetch or an image tag on any web
// page could otherwise spend a bucket from a browser that reaches the port.
//
// A call that fails is answered with the HTTP status of its gRPC code (see
// HTTPStatus) and the body
//
//	{"code": "invalid_argument", "message": "descriptors[0].entries[0].key: must not be empty"}
//
// — code is the gRPC code's name in snake case, message the gRPC status
// message, which names the field at fault. A body that is not JSON of the
// request message (an unknown field, a wrong type) is invalid_argument,
// "request body: " and protojson's message naming the field, answered by
// CheckDecoded where the interceptors place it, so that the interceptors
// before it (metrics) count it as the daemon's gRPC server counts a message
// that does not decode. A
// body larger than the limit (WithMaxBodyBytes) is 413, resource_exhausted,
// as gRPC answers a message larger than its limit. On /json too errors are
// these JSON bodies (upstream answers every error 400 with a plain text
// body): a malformed request is 400 there as well.
//
// # Context
//
// The call's context is the HTTP request's, so a client that goes away
// cancels it. Interceptors find the request's header fields as incoming gRPC
// metadata (keys in lower case) and the client's address as its peer, so an
// interceptor that authenticates gRPC calls by metadata does the same for
// HTTP ones. The body must arrive within the read timeout (WithReadTimeout).
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimitd/ratelimitd/internal/transport/recvlimit"
)

// DefaultMaxBodyBytes is the default request body limit: 4 MiB, gRPC's
// default limit on a received message, so that both transports accept the
// same requests.
const DefaultMaxBodyBytes = 4 << 20

// DefaultReadTimeout is how long a request body may take to arrive by
// default.
const DefaultReadTimeout = 10 * time.Second

// UpstreamJSONPath is the path of envoyproxy/ratelimit's JSON endpoint.
const UpstreamJSONPath = "/json"

// envoyService is the Envoy v3 service's full name, whose ShouldRateLimit
// /json serves.
const envoyService = "envoy.service.ratelimit.v3.RateLimitService"

// Server serves the unary methods of the services registered on it on an
// http.ServeMux. Register services before serving.
type Server struct {
	mux          *http.ServeMux
	interceptors []grpc.UnaryServerInterceptor
	interceptor  grpc.UnaryServerInterceptor // interceptors, then CheckDecoded
	maxBody      int64
	readTimeout  time.Duration
	waiting      *recvlimit.Limiter // nil: bodies unbounded in number
}

// Option configures a Server.
type Option func(*Server)

// WithInterceptors runs every call through these interceptors, in order —
// the daemon passes the ones its gRPC server chains, with CheckDecoded
// where its gRPC server checks decoding.
func WithInterceptors(is ...grpc.UnaryServerInterceptor) Option {
	return func(s *Server) { s.interceptors = is }
}

// WithMaxBodyBytes sets the request body limit (default
// DefaultMaxBodyBytes); n < 1 means the default.
func WithMaxBodyBytes(n int64) Option {
	return func(s *Server) {
		if n >= 1 {
			s.maxBody = n
		}
	}
}

// WithReadTimeout sets how long the request body may take to arrive,
// counted from when the handler starts (default DefaultReadTimeout); d <= 0
// means the default.
func WithReadTimeout(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.readTimeout = d
		}
	}
}

// WithWaiting bounds the bodies being read at once by l
// (internal/transport/recvlimit): when its Max are being read, one more cuts off
// the one read longest, which is answered 400 and its connection closed;
// so do bodies that take l's timeout.
func WithWaiting(l *recvlimit.Limiter) Option {
	return func(s *Server) { s.waiting = l }
}

// New returns a Server that adds a route to mux for each unary method
// registered on it.
func New(mux *http.ServeMux, opts ...Option) *Server {
	s := &Server{mux: mux, maxBody: DefaultMaxBodyBytes, readTimeout: DefaultReadTimeout}
	for _, opt := range opts {
		opt(s)
	}
	s.interceptor = chain(append(s.interceptors[:len(s.interceptors):len(s.interceptors)], CheckDecoded))
	return s
}

// decoded is where a call's body decoding leaves its error, in the call's
// context, for CheckDecoded.
type decoded struct{ err error }

type decodedKey struct{}

// CheckDecoded is the interceptor that answers a call whose body did not
// decode as the request message: InvalidArgument, "request body: ..." It
// passes every other call, and any call that did not come through a
// Server. A Server runs it after its interceptors in any case; put it
// earlier among them (as the daemon does, right after the metrics) to
// refuse a malformed body before the interceptors after it see the
// partly decoded message.
func CheckDecoded(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if d, ok := ctx.Value(decodedKey{}).(*decoded); ok && d.err != nil {
		return nil, d.err
	}
	return handler(ctx, req)
}

// RegisterService implements grpc.ServiceRegistrar: it routes
// POST /<desc.ServiceName>/<method> to each of desc's unary methods on impl
// (streaming methods are not served), and /json to the Envoy v3 service's
// ShouldRateLimit. It panics, as http.ServeMux does, if a route is taken.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for i := range desc.Methods {
		m := &method{
			server:     s,
			impl:       impl,
			desc:       desc.Methods[i],
			fullMethod: "/" + desc.ServiceName + "/" + desc.Methods[i].MethodName,
		}
		s.mux.Handle("POST "+m.fullMethod, m)
		if desc.ServiceName == envoyService && m.desc.MethodName == "ShouldRateLimit" {
			s.mux.Handle("POST "+UpstreamJSONPath, &upstreamJSON{m})
		}
	}
}

// method serves one unary method.
type method struct {
	server     *Server
	impl       any
	desc       grpc.MethodDesc
	fullMethod string
}

func (m *method) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, ok := m.call(w, r)
	if ok {
		writeMessage(w, http.StatusOK, resp, withDefaults)
	}
}

// upstreamJSON serves the Envoy v3 ShouldRateLimit as envoyproxy/ratelimit's
// /json does.
type upstreamJSON struct{ m *method }

func (u *upstreamJSON) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, ok := u.m.call(w, r)
	if !ok {
		return
	}
	code := http.StatusOK
	switch resp.(*rlsv3.RateLimitResponse).GetOverallCode() {
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		code = http.StatusTooManyRequests
	case rlsv3.RateLimitResponse_UNKNOWN:
		code = http.StatusInternalServerError
	}
	writeMessage(w, code, resp, asUpstream)
}

// call reads and decodes the request, runs the method and returns its
// response; on failure it has written the error and returns false.
func (m *method) call(w http.ResponseWriter, r *http.Request) (proto.Message, bool) {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeError(w, http.StatusUnsupportedMediaType, codes.InvalidArgument,
			"Content-Type: want application/json, got "+strconv.Quote(r.Header.Get("Content-Type")))
		return nil, false
	}
	body, err := m.server.readBody(w, r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
				"request body: larger than "+strconv.FormatInt(tooLarge.Limit, 10)+" bytes")
		} else {
			writeError(w, http.StatusBadRequest, codes.InvalidArgument, "request body: "+err.Error())
		}
		return nil, false
	}
	// Decoding never fails the call here, so that the interceptors before
	// CheckDecoded see and count it; CheckDecoded answers the error.
	d := new(decoded)
	decode := func(msg any) error {
		if err := protojson.Unmarshal(body, msg.(proto.Message)); err != nil {
			d.err = status.Error(codes.InvalidArgument, "request body: "+err.Error())
		}
		return nil
	}
	ctx := context.WithValue(callContext(r), decodedKey{}, d)
	resp, err := m.desc.Handler(m.impl, ctx, decode, m.server.interceptor)
	if err != nil {
		st := status.Convert(err)
		writeError(w, HTTPStatus(st.Code()), st.Code(), st.Message())
		return nil, false
	}
	return resp.(proto.Message), true
}

// readBody reads the whole body, at most maxBody bytes, within the read
// timeout, as one of the bodies the waiting limiter bounds (when there is
// one): a body it ends is cut off (its connection's read deadline set to
// now).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// Not every ResponseWriter supports deadlines (a test recorder does
	// not); the server's own timeouts then apply.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.readTimeout))
	if s.waiting != nil {
		ctx := s.waiting.Wait(r.Context(), nil)
		defer s.waiting.Arrived(ctx)
		stop := context.AfterFunc(ctx, func() { _ = rc.SetReadDeadline(time.Now()) })
		defer stop()
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
}

// callContext is the request's context with its header fields as incoming
// metadata and the client as the peer.
func callContext(r *http.Request) context.Context {
	md := make(metadata.MD, len(r.Header))
	for k, vs := range r.Header {
		md[strings.ToLower(k)] = vs
	}
	ctx := metadata.NewIncomingContext(r.Context(), md)
	if addr, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
	}
	return ctx
}

func isJSON(contentType string) bool {
	t, _, err := mime.ParseMediaType(contentType)
	return err == nil && t == "application/json"
}

// withDefaults writes every scalar field, zeros included ("remaining":
// "0", "shadow": false), so that a caller never has to know proto3's
// default values; asUpstream omits them, as envoyproxy/ratelimit's /json.
var (
	withDefaults = protojson.MarshalOptions{EmitDefaultValues: true}
	asUpstream   = protojson.MarshalOptions{}
)

func writeMessage(w http.ResponseWriter, code int, m proto.Message, opts protojson.MarshalOptions) {
	b, err := opts.Marshal(m)
	if err != nil {
		writeError(w, http.StatusInternalServerError, codes.Internal, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// errorBody is the JSON error body: Connect's unary error.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, httpCode int, code codes.Code, msg string) {
	b, _ := json.Marshal(errorBody{Code: CodeName(code), Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(httpCode)
	w.Write(append(b, '\n'))
}

// CodeName is c's name in snake case, as the Connect protocol writes codes:
// "invalid_argument", "unavailable"; "code_N" for a code gRPC does not
// define.
func CodeName(c codes.Code) string {
	if c > codes.Unauthenticated {
		return "code_" + strconv.FormatUint(uint64(c), 10)
	}
	if c == codes.OK {
		return "ok"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if 'A' <= r && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// HTTPStatus is the HTTP status answering a call that failed with gRPC code
// c, as the Connect protocol and grpc-gateway map them: InvalidArgument,
// FailedPrecondition and OutOfRange 400; Unauthenticated 401;
// PermissionDenied 403; NotFound 404; AlreadyExists and Aborted 409;
// ResourceExhausted 429; Canceled 499 (the client went away); Unimplemented
// 501; Unavailable 503; DeadlineExceeded 504; everything else 500.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Canceled:
		return 499
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// chain runs is in order, the first outermost, as grpc.ChainUnaryInterceptor
// does; nil when there are none.
func chain(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(is) - 1; i > 0; i-- {
			inner, h := is[i], next
			next = func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, h) }
		}
		return is[0](ctx, req, info, next)
	}
}
