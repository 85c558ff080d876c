// Package polyglot_test proves that any language can call ratelimitd: it
// runs a real daemon, calls it on both gRPC APIs (ratelimit.v1 and Envoy's
// envoy.service.ratelimit.v3) from Python (call.py, Debian's python3-grpcio
// under /usr/bin/python3) and from Node (call.js, @grpc/grpc-js), and
// checks the decisions each prints. call_http.py calls the same APIs as
// JSON over HTTP with nothing but Python's standard library.
//
// Neither language uses generated code. Python builds its message classes
// at run time from a FileDescriptorSet that this test writes from the
// descriptors compiled into the Go binary (the project's proto and
// go-control-plane's Envoy protos, with everything they import). Node loads
// ratelimit.v1 from the project's .proto file and Envoy's v3 from the same
// descriptor set.
//
// What they need is installed by install.sh (scripts/test runs it); a missing part
// fails the test rather than skipping it.
package polyglot_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/daemon/daemontest"
)

// decision is one line a script prints.
type decision struct {
	Call         string   `json:"call"`
	Code         string   `json:"code,omitempty"`
	Policy       string   `json:"policy,omitempty"` // v1: the rule of the status most_restrictive names
	RetryAfterMs *int64   `json:"retry_after_ms"`
	Statuses     []status `json:"statuses,omitempty"`
	Error        string   `json:"error,omitempty"`
}

type status struct {
	Code      string `json:"code"`
	Rule      string `json:"rule"`
	Remaining uint64 `json:"remaining"`
	// ResetMs is v3's duration_until_reset: until the bucket is full.
	ResetMs *int64 `json:"reset_ms,omitempty"`
}

func ms(n int64) *int64 { return &n }

// want is what both scripts must print against a fresh daemon serving the
// default policy. Alice's calls go to v1, Bob's to v3; the global and
// per-endpoint buckets are shared by both APIs.
var want = []decision{
	{Call: "v1 first", Code: "CODE_OK", Policy: "per-user-per-endpoint", Statuses: []status{
		{"CODE_OK", "global", 6999, nil}, {"CODE_OK", "per-endpoint", 3999, nil}, {"CODE_OK", "per-user-per-endpoint", 799, nil}}},
	{Call: "v1 spend", Code: "CODE_OK", Policy: "per-user-per-endpoint", Statuses: []status{{"CODE_OK", "per-user-per-endpoint", 0, nil}}},
	// Denied on the user tier, one token at 600 a minute away; nothing is
	// charged on the other two.
	{Call: "v1 denied", Code: "CODE_OVER_LIMIT", Policy: "per-user-per-endpoint", RetryAfterMs: ms(100), Statuses: []status{
		{"CODE_OK", "global", 6999, nil}, {"CODE_OK", "per-endpoint", 3999, nil}, {"CODE_OVER_LIMIT", "per-user-per-endpoint", 0, nil}}},
	{Call: "v1 peek", Code: "CODE_OK", Policy: "per-user-per-endpoint", Statuses: []status{{"CODE_OK", "per-user-per-endpoint", 0, nil}}},
	{Call: "v1 inline", Code: "CODE_OK", Policy: "tenant-quota", Statuses: []status{{"CODE_OK", "tenant-quota", 0, nil}}},
	{Call: "v1 inline denied", Code: "CODE_OVER_LIMIT", Policy: "tenant-quota", RetryAfterMs: ms(30000), Statuses: []status{
		{"CODE_OVER_LIMIT", "tenant-quota", 0, nil}}},
	{Call: "v1 invalid", Error: "INVALID_ARGUMENT: domain: must not be empty"},

	// v3 has no retry time; duration_until_reset is until the bucket is
	// full again: Bob's 800 tokens at 600 a minute take 80s.
	{Call: "v3 first", Code: "OK", Statuses: []status{
		{"OK", "global", 6998, ms(20)}, {"OK", "per-endpoint", 3998, ms(40)}, {"OK", "per-user-per-endpoint", 799, ms(100)}}},
	{Call: "v3 spend", Code: "OK", Statuses: []status{{"OK", "per-user-per-endpoint", 0, ms(80_000)}}},
	{Call: "v3 denied", Code: "OVER_LIMIT", Statuses: []status{
		{"OK", "global", 6998, ms(20)}, {"OK", "per-endpoint", 3998, ms(40)}, {"OVER_LIMIT", "per-user-per-endpoint", 0, ms(80_000)}}},
	{Call: "v3 invalid", Error: "INVALID_ARGUMENT: domain: must not be empty"},
}

func TestPython(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import grpc and protobuf (scripts/test runs client/polyglot/install.sh): %v\n%s", python, err, out)
	}
	d := daemontest.Start(t, "")
	run(t, python, "call.py", d.GRPCAddr(), writeDescriptorSet(t))
}

// httpAnswer is one line call_http.py prints.
type httpAnswer struct {
	Call       string       `json:"call"`
	HTTP       int          `json:"http"`
	Code       string       `json:"code,omitempty"`
	RetryAfter *string      `json:"retry_after,omitempty"`
	Statuses   []httpStatus `json:"statuses,omitempty"`
	Error      string       `json:"error,omitempty"`
}

type httpStatus struct {
	Code      string `json:"code"`
	Rule      string `json:"rule"`
	Remaining uint64 `json:"remaining"`
}

func str(s string) *string { return &s }

// wantHTTP is what call_http.py must print against a fresh daemon serving
// the default policy.
var wantHTTP = []httpAnswer{
	{Call: "v1 first", HTTP: 200, Code: "CODE_OK", Statuses: []httpStatus{
		{"CODE_OK", "global", 6999}, {"CODE_OK", "per-endpoint", 3999}, {"CODE_OK", "per-user-per-endpoint", 799}}},
	{Call: "v1 spend", HTTP: 200, Code: "CODE_OK", Statuses: []httpStatus{{"CODE_OK", "per-user-per-endpoint", 0}}},
	{Call: "v1 denied", HTTP: 200, Code: "CODE_OVER_LIMIT", RetryAfter: str("0.100s"), Statuses: []httpStatus{
		{"CODE_OK", "global", 6999}, {"CODE_OK", "per-endpoint", 3999}, {"CODE_OVER_LIMIT", "per-user-per-endpoint", 0}}},
	{Call: "v1 invalid", HTTP: 400, Error: "invalid_argument: domain: must not be empty"},
	{Call: "v3 first", HTTP: 200, Code: "OK", Statuses: []httpStatus{{"OK", "per-user-per-endpoint", 799}}},
	{Call: "json spend", HTTP: 200, Code: "OK", Statuses: []httpStatus{{"OK", "per-user-per-endpoint", 0}}},
	{Call: "json denied", HTTP: 429, Code: "OVER_LIMIT", Statuses: []httpStatus{{"OVER_LIMIT", "per-user-per-endpoint", 0}}},
}

// TestPythonHTTP calls the JSON API over HTTP from Python's standard
// library alone: no gRPC, no protobuf.
func TestPythonHTTP(t *testing.T) {
	const python = "/usr/bin/python3"
	d := daemontest.Start(t, "")
	cmd := exec.CommandContext(t.Context(), python, "call_http.py", "http://"+d.HTTPAddr())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s call_http.py: %v\n%s", python, err, stderr.Bytes())
	}
	var got []httpAnswer
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var a httpAnswer
		if err := dec.Decode(&a); err != nil {
			t.Fatalf("reading the script's output: %v\n%s", err, out)
		}
		got = append(got, a)
	}
	for i := range max(len(got), len(wantHTTP)) {
		switch {
		case i >= len(got):
			t.Errorf("missing %q", wantHTTP[i].Call)
		case i >= len(wantHTTP):
			t.Errorf("unexpected %+v", got[i])
		case !reflect.DeepEqual(got[i], wantHTTP[i]):
			g, _ := json.Marshal(got[i])
			w, _ := json.Marshal(wantHTTP[i])
			t.Errorf("%s:\n got %s\nwant %s", wantHTTP[i].Call, g, w)
		}
	}
}

func TestNode(t *testing.T) {
	if _, err := os.Stat(filepath.Join("node_modules", "@grpc", "grpc-js")); err != nil {
		t.Fatalf("the Node modules are missing (scripts/test runs client/polyglot/install.sh): %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	protoDir, err := filepath.Abs(filepath.Join("..", "..", "proto"))
	if err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, "")
	run(t, node, "call.js", d.GRPCAddr(), writeDescriptorSet(t), protoDir)
}

// run runs a script and checks the decisions it prints against want.
func run(t *testing.T, interpreter string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), interpreter, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", interpreter, args, err, stderr.Bytes())
	}
	var got []decision
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var d decision
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("reading the script's output: %v\n%s", err, out)
		}
		got = append(got, d)
	}
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Errorf("missing %q", want[i].Call)
		case i >= len(want):
			t.Errorf("unexpected %+v", got[i])
		case !reflect.DeepEqual(got[i], want[i]):
			g, _ := json.Marshal(got[i])
			w, _ := json.Marshal(want[i])
			t.Errorf("%s:\n got %s\nwant %s", want[i].Call, g, w)
		}
	}
}

// writeDescriptorSet writes the files of both services, each after the
// files it imports, as a serialized FileDescriptorSet, and returns its path.
func writeDescriptorSet(t *testing.T) string {
	t.Helper()
	set := &descriptorpb.FileDescriptorSet{}
	seen := make(map[string]bool)
	var add func(protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		if f.IsPlaceholder() {
			t.Fatalf("%s is not linked into the test binary", f.Path())
		}
		imports := f.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(ratelimitv1.File_ratelimit_v1_ratelimit_proto)
	add(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ratelimitd.binpb")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
