package main

import (
	"flag"
	"fmt"
	"io"
)

// flagGroup is a topic of the daemon's --help: a title and its flags.
type flagGroup struct {
	title string
	flags []string
}

// flagGroups orders the daemon's --help by topic, the flags most runs need
// first. Every flag is in exactly one group (TestHelpGroupsEveryFlag).
var flagGroups = []flagGroup{
	{"Common", []string{"config", "grpc-addr", "http-addr", "admin-addr", "store", "state-file", "max-memory", "log-level", "log-format", "version"}},
	{"Policy", []string{"shadow-mode", "overdraft-by-default", "healthcheck-needs-policy", "max-policy-bytes", "max-policy-descriptors", "upstream-env"}},
	{"Policy over xDS (Envoy Gateway)", []string{"xds-server", "xds-node-id", "xds-headers", "xds-start-without-policy", "xds-max-message-bytes",
		"xds-backoff-initial", "xds-backoff-max", "xds-tls", "xds-tls-ca", "xds-tls-cert", "xds-tls-key", "xds-tls-server-name"}},
	{"Redis store", []string{"redis-addr", "redis-cluster", "redis-sentinel", "redis-username", "redis-password-file", "redis-sentinel-username",
		"redis-sentinel-password-file", "redis-tls", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-key-prefix", "redis-key-layout", "redis-spread-keys",
		"redis-timeout", "redis-failure-mode", "redis-breaker-failures", "redis-breaker-cooloff", "redis-deny-cache"}},
	{"Memory store", []string{"max-buckets", "sweep-interval", "snapshot-interval"}},
	{"Requests and responses", []string{"max-descriptors", "max-entries", "max-key-bytes", "max-value-bytes", "response-headers", "response-dynamic-metadata"}},
	{"Quota (Envoy's RLQS)", []string{"quota-daemons"}},
	{"TLS and authorization", []string{"tls-cert", "tls-key", "tls-client-ca", "authz-policy", "allowed-hosts"}},
	{"Connections and transport bounds", []string{"max-connections", "idle-timeout", "header-timeout", "max-header-bytes", "message-timeout",
		"grpc-max-streams", "grpc-max-waiting", "grpc-paced-read-rate", "grpc-max-long-streams", "grpc-max-long-streams-per-conn",
		"grpc-max-long-streams-per-caller", "http-max-waiting", "grpc-keepalive-time", "grpc-keepalive-timeout",
		"grpc-keepalive-min-time"}},
	{"Metrics, traces and the console", []string{"metrics-addr", "metrics-path", "upstream-metric-names", "near-limit-ratio", "max-detailed-series",
		"otlp-endpoint", "otlp-protocol", "trace-sample-ratio", "trace-service-name", "console", "console-values", "pprof"}},
	{"Shutdown", []string{"shutdown-delay", "shutdown-grace"}},
}

// printGroupedFlags writes fs's flags as flag.PrintDefaults does, under
// the titles of groups and in their order; a flag of fs that no group
// names is listed last, under "Other".
func printGroupedFlags(w io.Writer, fs *flag.FlagSet, groups []flagGroup) {
	listed := map[string]bool{}
	section := func(title string, names []string) {
		one := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		one.SetOutput(w)
		for _, name := range names {
			f := fs.Lookup(name)
			if f == nil || listed[name] {
				continue
			}
			listed[name] = true
			one.Var(f.Value, f.Name, f.Usage)
			one.Lookup(name).DefValue = f.DefValue // the default, not a value parsed before --help
		}
		if countFlags(one) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		one.PrintDefaults()
	}
	for _, g := range groups {
		section(g.title, g.flags)
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f.Name)
		}
	})
	section("Other", rest)
}

func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}
