// Package admin serves ratelimitd's administrative HTTP endpoints: the
// policy in force, and Go's profiler.
//
//	GET /policies        the policy in force as JSON, with where each domain came from
//	GET /debug/pprof/    net/http/pprof's index and profiles (when enabled)
//
// /debug/pprof/cmdline is never served, not even with profiles enabled: the
// command line may hold what an operator did not mean to publish (it is
// answered 404, as an unknown profile).
package admin

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
)

// Loaded is the policy in force, and where and when it was loaded.
type Loaded struct {
	Policy *config.Policy
	// Path is the --config path it was loaded from; "" for the embedded
	// default policy; for a policy over xDS, "xds://SERVER (node ID)".
	Path string
	// Version is the xDS version_info of a policy over xDS; "" otherwise.
	Version string
	// At is when it was loaded: at start, or by the last successful
	// reload.
	At time.Time
}

// Options says what to serve.
type Options struct {
	// Policy returns the policy in force; it is called for each request
	// to /policies.
	Policy func() Loaded
	// XDS, when not nil, returns the xDS client's status (nil when the
	// policy does not come over xDS), shown as the "xds" field.
	XDS func() *xdspolicy.Status
	// Pprof serves /debug/pprof/: the index, every runtime profile by
	// name (heap, goroutine, ...), profile (CPU), symbol and trace; never
	// cmdline. Profiles show the daemon's internals (goroutine stacks
	// include request data being decided) and cost CPU while they run:
	// serve them only on an address that only operators reach.
	Pprof bool
}

// Register adds the endpoints to mux.
func Register(mux *http.ServeMux, o Options) {
	mux.HandleFunc("GET /policies", func(w http.ResponseWriter, _ *http.Request) {
		l := o.Policy()
		body := Policies{Config: l.Path, Version: l.Version, LoadedAt: l.At.UTC(), PolicyView: l.Policy.View()}
		if o.XDS != nil {
			body.XDS = o.XDS()
		}
		if body.Config == "" {
			body.Config = "embedded default"
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(body)
	})
	if o.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
}

// Policies is the JSON body of /policies.
type Policies struct {
	// Config is the --config path, or "embedded default".
	Config string `json:"config"`
	// Version is the xDS version of the policy in force, when it came
	// over xDS.
	Version string `json:"version,omitempty"`
	// XDS is the xDS subscription: server, node id, whether connected,
	// the version in force, and the last refused update (NACK) since the
	// last applied one.
	XDS *xdspolicy.Status `json:"xds,omitempty"`
	// LoadedAt is when the policy was loaded, in UTC.
	LoadedAt time.Time `json:"loaded_at"`
	// The domains, each with its source file and rule tree.
	config.PolicyView
}
