// Package upstreamenv translates envoyproxy/ratelimit's environment (its
// settings package: every variable, with upstream's defaults) into
// ratelimitd's flags, so that ratelimitd started where upstream was, with
// upstream's environment (as Envoy Gateway's deployment gives it), behaves
// as upstream would.
//
// Each variable of upstream's settings is, as Variables lists:
//
//   - honoured: it becomes a flag value (Translation.Flags), with upstream's
//     default when it is unset, as upstream reads it;
//   - ignored: ratelimitd has nothing like it, or does it anyway; when it is
//     set to something other than upstream's default (or, for a few, to a
//     value that would change behaviour), Translation.Warnings says so;
//   - refused: a value ratelimitd cannot honour without behaving otherwise
//     than upstream in a way that matters (security, where the counts live);
//     Translate returns an error naming the variable.
//
// A value upstream could not parse (a bad boolean, number or duration) is
// refused too, naming the variable. A value that parses is passed to its
// flag as it is, never dropped for the flag's default: cmd/ratelimitd sets
// each flag with flag.FlagSet.Set, so the flag's own check refuses what it
// refuses on the command line (REDIS_TIMEOUT=0s as --redis-timeout=0s,
// say), and the error names the variable beside the flag. The command line
// wins over the environment: cmd/ratelimitd sets the translated flags
// before it parses its arguments.
package upstreamenv

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Use is what ratelimitd does with a variable.
type Use string

// The uses of a variable.
const (
	Honoured Use = "honoured"
	Ignored  Use = "ignored"
	Refused  Use = "refused"
)

// Flag is one flag value the environment sets.
type Flag struct {
	// Name is the flag's name, without dashes; Value its value as the
	// command line would give it.
	Name, Value string
	// From names the variables it comes from.
	From string
}

// Translation is what the environment says, in ratelimitd's terms.
type Translation struct {
	// Flags to set, in order, before the command line is parsed.
	Flags []Flag
	// RedisPassword is REDIS_AUTH's password ("" for none), for when
	// neither --redis-password-file nor $RATELIMITD_REDIS_PASSWORD gives
	// one. It is kept out of Flags: a secret is never a flag.
	RedisPassword string
	// RedisSentinelPassword is REDIS_SENTINEL_AUTH's, with REDIS_TYPE=SENTINEL:
	// the sentinels' password, not a flag either.
	RedisSentinelPassword string
	// Warnings name each variable set that ratelimitd ignores, and why.
	Warnings []string
}

// Env looks a variable up, as os.LookupEnv does.
type Env func(name string) (string, bool)

// reader reads variables with upstream's defaults and parsers, collecting
// the first problem.
type reader struct {
	env Env
	err error
	t   *Translation
}

func (r *reader) str(name string) string {
	if v, ok := r.env(name); ok {
		return v
	}
	return variable(name).Default
}

// values names the variables with their values, upstream's defaults
// marked: RUNTIME_ROOT unset (upstream's default "/srv/runtime_data/current"),
// RUNTIME_SUBDIRECTORY="config".
func (r *reader) values(names ...string) string {
	parts := make([]string, len(names))
	for i, name := range names {
		if v, ok := r.env(name); ok {
			parts[i] = fmt.Sprintf("%s=%q", name, v)
		} else {
			parts[i] = fmt.Sprintf("%s unset (upstream's default %q)", name, variable(name).Default)
		}
	}
	return strings.Join(parts, ", ")
}

func (r *reader) set(name string) bool {
	_, ok := r.env(name)
	return ok
}

func (r *reader) boolean(name string) bool {
	s := r.str(name)
	if s == "" {
		return false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		r.fail(fmt.Errorf("%s=%q: want true or false", name, s))
	}
	return b
}

func (r *reader) integer(name string) int64 {
	s := r.str(name)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.fail(fmt.Errorf("%s=%q: want a whole number", name, s))
	}
	return n
}

func (r *reader) duration(name string) time.Duration {
	s := r.str(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		r.fail(fmt.Errorf("%s=%q: want a duration such as 3s", name, s))
	}
	return d
}

// durationFlag sets the flag called flag to the duration of the variable
// called name (upstream's default when it is unset), whatever it is: a
// value the flag refuses (0, a negative duration) is refused when the flag
// is set, naming the variable, not replaced by the flag's default.
func (r *reader) durationFlag(flag, name string) {
	if r.str(name) != "" {
		r.flag(flag, r.duration(name).String(), name)
	}
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) flag(name, value, from string) {
	r.t.Flags = append(r.t.Flags, Flag{Name: name, Value: value, From: from})
}

// ignoreIf warns that name is ignored, with why, when it is set to
// something other than upstream's default.
func (r *reader) ignoreIfSet(name, why string) {
	if v, ok := r.env(name); ok && v != variable(name).Default {
		r.t.Warnings = append(r.t.Warnings, fmt.Sprintf("%s=%q is ignored: %s", name, v, why))
	}
}

// ignoreIfTrue warns that name is ignored when it is (by default or not)
// true.
func (r *reader) ignoreIfTrue(name, why string) {
	if r.boolean(name) {
		r.t.Warnings = append(r.t.Warnings, fmt.Sprintf("%s=true is ignored: %s", name, why))
	}
}

// refuseIfTrue refuses name when it is true.
func (r *reader) refuseIfTrue(name, why string) {
	if r.boolean(name) {
		r.fail(fmt.Errorf("%s=true: %s", name, why))
	}
}

// Translate reads upstream's environment through env and returns its
// translation, or an error naming the first variable refused.
func Translate(env Env) (Translation, error) {
	var t Translation
	r := &reader{env: env, t: &t}
	r.listen()
	r.grpcTLS()
	r.logging()
	r.policy()
	r.stats()
	r.store()
	r.decisions()
	r.tracing()
	r.ignored()
	if r.err != nil {
		return Translation{}, r.err
	}
	return t, nil
}

func (r *reader) listen() {
	r.flag("http-addr", net.JoinHostPort(r.str("HOST"), strconv.FormatInt(r.integer("PORT"), 10)), "HOST, PORT")
	r.flag("grpc-addr", net.JoinHostPort(r.str("GRPC_HOST"), strconv.FormatInt(r.integer("GRPC_PORT"), 10)), "GRPC_HOST, GRPC_PORT")
	if r.str("GRPC_UDS") != "" {
		r.fail(errors.New("GRPC_UDS: ratelimitd listens on TCP only (GRPC_HOST, GRPC_PORT)"))
	}
}

func (r *reader) grpcTLS() {
	if !r.boolean("GRPC_SERVER_USE_TLS") {
		for _, v := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"} {
			r.ignoreIfSet(v, "GRPC_SERVER_USE_TLS is not true")
		}
		return
	}
	cert, key := r.str("GRPC_SERVER_TLS_CERT"), r.str("GRPC_SERVER_TLS_KEY")
	if cert == "" || key == "" {
		r.fail(errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
		return
	}
	r.flag("tls-cert", cert, "GRPC_SERVER_TLS_CERT")
	r.flag("tls-key", key, "GRPC_SERVER_TLS_KEY")
	if ca := r.str("GRPC_CLIENT_TLS_CACERT"); ca != "" {
		r.flag("tls-client-ca", ca, "GRPC_CLIENT_TLS_CACERT")
	}
	if r.str("GRPC_CLIENT_TLS_SAN") != "" {
		r.fail(errors.New("GRPC_CLIENT_TLS_SAN: ratelimitd does not pin the client certificate's SAN; name the clients allowed in an --authz-policy file instead"))
	}
}

// logLevels maps logrus's levels to ratelimitd's.
var logLevels = map[string]string{
	"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn",
	"error": "error", "fatal": "error", "panic": "error",
}

func (r *reader) logging() {
	lv := strings.ToLower(r.str("LOG_LEVEL"))
	level, ok := logLevels[lv]
	if !ok {
		r.fail(fmt.Errorf("LOG_LEVEL=%q: want trace, debug, info, warn, error, fatal or panic", r.str("LOG_LEVEL")))
	}
	r.flag("log-level", level, "LOG_LEVEL")
	switch f := strings.ToLower(r.str("LOG_FORMAT")); f {
	case "text", "json":
		r.flag("log-format", f, "LOG_FORMAT")
	default:
		r.fail(fmt.Errorf("LOG_FORMAT=%q: want text or json", r.str("LOG_FORMAT")))
	}
}

func (r *reader) policy() {
	r.refuseIfTrue("MERGE_DOMAIN_CONFIG", "ratelimitd keeps a domain in one policy file (or resource); a domain defined twice is an error")
	switch ct := r.str("CONFIG_TYPE"); ct {
	case "FILE":
		dir := filepath.Join(r.str("RUNTIME_ROOT"), r.str("RUNTIME_SUBDIRECTORY"), r.str("RUNTIME_APPDIRECTORY"))
		r.flag("config", dir, r.values("RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"))
		r.ignoreIfTrue("FORCE_START_WITHOUT_INITIAL_CONFIG", "with CONFIG_TYPE=FILE the policy files must load at start")
		if v, ok := r.env("RUNTIME_IGNOREDOTFILES"); ok && !r.boolean("RUNTIME_IGNOREDOTFILES") {
			r.t.Warnings = append(r.t.Warnings, fmt.Sprintf("RUNTIME_IGNOREDOTFILES=%q is ignored: ratelimitd always skips files whose name starts with a dot", v))
		}
		if v, ok := r.env("RUNTIME_WATCH_ROOT"); ok && !r.boolean("RUNTIME_WATCH_ROOT") {
			r.t.Warnings = append(r.t.Warnings, fmt.Sprintf("RUNTIME_WATCH_ROOT=%q is ignored: ratelimitd watches the policy directory itself", v))
		}
		for _, v := range xdsVariables {
			r.ignoreIfSet(v, "CONFIG_TYPE is FILE")
		}
	case "GRPC_XDS_SOTW":
		r.xds()
	default:
		r.fail(fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", ct))
	}
}

// xdsVariables are the settings of CONFIG_TYPE=GRPC_XDS_SOTW.
var xdsVariables = []string{
	"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
}

func (r *reader) xds() {
	r.flag("xds-server", r.str("CONFIG_GRPC_XDS_SERVER_URL"), "CONFIG_GRPC_XDS_SERVER_URL")
	r.flag("xds-node-id", r.str("CONFIG_GRPC_XDS_NODE_ID"), "CONFIG_GRPC_XDS_NODE_ID")
	r.flag("xds-start-without-policy", strconv.FormatBool(r.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG")), "FORCE_START_WITHOUT_INITIAL_CONFIG")
	if h := r.str("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); h != "" {
		r.flag("xds-headers", h, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	}
	r.durationFlag("xds-backoff-initial", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")
	r.durationFlag("xds-backoff-max", "XDS_CLIENT_BACKOFF_MAX_INTERVAL")
	if r.str("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") != "" {
		r.flag("xds-max-message-bytes", strconv.FormatInt(r.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"), 10), "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
	}
	for _, v := range []string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"} {
		r.ignoreIfSet(v, "ratelimitd waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL after a broken stream, doubling up to XDS_CLIENT_BACKOFF_MAX_INTERVAL, each wait drawn from its upper half")
	}
	r.ignoreIfSet("CONFIG_GRPC_XDS_NODE_METADATA", "ratelimitd sends the node id alone")
	if !r.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		for _, v := range []string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"} {
			r.ignoreIfSet(v, "CONFIG_GRPC_XDS_SERVER_USE_TLS is not true")
		}
		return
	}
	r.flag("xds-tls", "true", "CONFIG_GRPC_XDS_SERVER_USE_TLS")
	for _, m := range []struct{ v, f string }{
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds-tls-cert"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds-tls-key"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds-tls-ca"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds-tls-server-name"},
	} {
		if s := r.str(m.v); s != "" {
			r.flag(m.f, s, m.v)
		}
	}
}

func (r *reader) stats() {
	const noStatsd = "ratelimitd exports Prometheus metrics only (USE_PROMETHEUS, or its HTTP port's /metrics)"
	r.ignoreIfTrue("USE_STATSD", noStatsd)
	r.ignoreIfTrue("USE_DOG_STATSD", noStatsd)
	for _, v := range []string{"STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD_MOGRIFIERS", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL"} {
		r.ignoreIfSet(v, noStatsd)
	}
	r.ignoreIfTrue("DISABLE_STATS", "ratelimitd's metrics are always kept (and cost nothing unless scraped)")
	if !r.boolean("USE_PROMETHEUS") {
		for _, v := range []string{"PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML"} {
			r.ignoreIfSet(v, "USE_PROMETHEUS is not true")
		}
		return
	}
	r.flag("metrics-addr", r.str("PROMETHEUS_ADDR"), "PROMETHEUS_ADDR")
	r.flag("metrics-path", r.str("PROMETHEUS_PATH"), "PROMETHEUS_PATH")
	r.flag("upstream-metric-names", "true", "USE_PROMETHEUS")
	r.ignoreIfSet("PROMETHEUS_MAPPER_YAML", "ratelimitd exports the series of upstream's default mapping (docs/envoy-gateway.md), whatever the file says")
}

func (r *reader) store() {
	switch b := strings.ToLower(r.str("BACKEND_TYPE")); b {
	case "redis":
		r.flag("store", "redis", "BACKEND_TYPE")
	default:
		r.fail(fmt.Errorf("BACKEND_TYPE=%q: ratelimitd keeps buckets in Redis (redis) or in its own memory (its --store memory, without upstream's environment)", r.str("BACKEND_TYPE")))
		return
	}
	for _, v := range memcacheVariables {
		r.ignoreIfSet(v, "BACKEND_TYPE is redis")
	}
	if s := strings.ToLower(r.str("REDIS_SOCKET_TYPE")); s != "tcp" {
		r.fail(fmt.Errorf("REDIS_SOCKET_TYPE=%q (upstream's default is unix): ratelimitd reaches Redis over TCP; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port", r.str("REDIS_SOCKET_TYPE")))
	}
	r.redisTopology()
	if auth := r.str("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			r.flag("redis-username", user, "REDIS_AUTH")
			auth = pass
		}
		r.t.RedisPassword = auth
	}
	r.redisTLS()
	r.durationFlag("redis-timeout", "REDIS_TIMEOUT")
	if p := r.str("CACHE_KEY_PREFIX"); p != "" {
		r.flag("redis-key-prefix", p, "CACHE_KEY_PREFIX")
	}
	r.redisIgnored()
}

// redisTopology maps REDIS_TYPE and REDIS_URL: one server, a cluster's
// seeds, or a sentinel master's name and its sentinels.
func (r *reader) redisTopology() {
	url := r.str("REDIS_URL")
	switch t := strings.ToUpper(r.str("REDIS_TYPE")); t {
	case "SINGLE":
		r.flag("redis-addr", url, "REDIS_URL")
	case "CLUSTER":
		r.flag("redis-cluster", url, "REDIS_TYPE, REDIS_URL")
	case "SENTINEL":
		master, sentinels, ok := strings.Cut(url, ",")
		if !ok || master == "" || sentinels == "" {
			r.fail(fmt.Errorf("REDIS_URL=%q: with REDIS_TYPE=SENTINEL, want the master's name and the sentinels' addresses: master,host:port[,host:port...]", url))
		}
		r.flag("redis-sentinel", master, "REDIS_TYPE, REDIS_URL")
		r.flag("redis-addr", sentinels, "REDIS_URL")
		r.t.RedisSentinelPassword = r.str("REDIS_SENTINEL_AUTH")
	default:
		r.fail(fmt.Errorf("REDIS_TYPE=%q: want SINGLE, CLUSTER or SENTINEL", r.str("REDIS_TYPE")))
	}
}

// redisTLS maps REDIS_TLS and its files; their variables without it are
// ignored.
func (r *reader) redisTLS() {
	if r.boolean("REDIS_TLS") {
		r.flag("redis-tls", "true", "REDIS_TLS")
		for _, m := range []struct{ v, f string }{
			{"REDIS_TLS_CLIENT_CERT", "redis-tls-cert"},
			{"REDIS_TLS_CLIENT_KEY", "redis-tls-key"},
			{"REDIS_TLS_CACERT", "redis-tls-ca"},
		} {
			if s := r.str(m.v); s != "" {
				r.flag(m.f, s, m.v)
			}
		}
		r.refuseIfTrue("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "ratelimitd always verifies Redis's certificate; give its CA in REDIS_TLS_CACERT")
	} else {
		for _, v := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"} {
			r.ignoreIfSet(v, "REDIS_TLS is not true")
		}
	}
}

// redisIgnored refuses or ignores, each with its reason, the Redis
// settings ratelimitd has no use for.
func (r *reader) redisIgnored() {
	r.refuseIfTrue("REDIS_PERSECOND", "ratelimitd keeps every bucket in one Redis (or cluster)")
	for _, v := range perSecondVariables {
		r.ignoreIfSet(v, "REDIS_PERSECOND is not true")
	}
	const pool = "ratelimitd sizes its Redis connections and batches its requests itself"
	for _, v := range []string{"REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_USE_EXPLICIT_PIPELINE", "REDIS_POOL_ON_EMPTY_BEHAVIOR"} {
		r.ignoreIfSet(v, pool)
	}
	if strings.ToUpper(r.str("REDIS_TYPE")) != "SENTINEL" {
		r.ignoreIfSet("REDIS_SENTINEL_AUTH", "REDIS_TYPE is not SENTINEL")
	}
	r.ignoreIfTrue("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "/healthcheck does not follow Redis; GET /healthz/redis and the gRPC health service ratelimitd.redis do")
	r.ignoreIfSet("EXPIRATION_JITTER_MAX_SECONDS", "ratelimitd's Redis keys expire when their bucket is back at rest")
	r.ignoreIfSet("LOCAL_CACHE_SIZE_IN_BYTES", "ratelimitd's cache of buckets over their limit is sized in buckets: --redis-deny-cache N")
}

var memcacheVariables = []string{
	"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
	"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
}

var perSecondVariables = []string{
	"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
	"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
	"REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_USE_EXPLICIT_PIPELINE", "REDIS_PERSECOND_TIMEOUT",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
}

func (r *reader) decisions() {
	ratio := r.str("NEAR_LIMIT_RATIO")
	if f, err := strconv.ParseFloat(ratio, 32); err != nil || !(f > 0 && f <= 1) {
		r.fail(fmt.Errorf("NEAR_LIMIT_RATIO=%q: want a number in (0, 1]", ratio))
	}
	r.flag("near-limit-ratio", ratio, "NEAR_LIMIT_RATIO")
	r.flag("shadow-mode", strconv.FormatBool(r.boolean("SHADOW_MODE")), "SHADOW_MODE")
	r.flag("healthcheck-needs-policy", strconv.FormatBool(r.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")), "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	if r.boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
		r.flag("response-headers", "legacy", "LIMIT_RESPONSE_HEADERS_ENABLED")
	}
	if r.boolean("RESPONSE_DYNAMIC_METADATA") {
		r.flag("response-dynamic-metadata", "true", "RESPONSE_DYNAMIC_METADATA")
	}
	for _, v := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
		r.ignoreIfSet(v, "ratelimitd's legacy headers have upstream's default names")
	}
	r.overdraft(r.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"))
}

// overdraft is where STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT becomes
// ratelimitd's daemon-wide overdraft switch: upstream counts every charge,
// past the limit too, unless the variable is true; ratelimitd counts a
// charge past the limit only for a limit with overdraft. So the variable
// unset or false means --overdraft-by-default, true means without it.
func (r *reader) overdraft(stop bool) {
	r.flag("overdraft-by-default", strconv.FormatBool(!stop), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
}

func (r *reader) ignored() {
	r.ignoreIfSet("DEBUG_HOST", "ratelimitd serves its profiles with --pprof on --admin-addr (else the HTTP port)")
	r.ignoreIfSet("DEBUG_PORT", "ratelimitd serves its profiles with --pprof on --admin-addr (else the HTTP port)")
	for _, v := range []string{"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE"} {
		r.ignoreIfSet(v, "ratelimitd does not age connections out")
	}
	for _, v := range []string{"TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID"} {
		r.ignoreIfSet(v, "set OTEL_RESOURCE_ATTRIBUTES (service.namespace=..., service.instance.id=...) instead")
	}
}

// otlpProtocols maps TRACING_EXPORTER_PROTOCOL to --otlp-protocol.
var otlpProtocols = map[string]string{"http": "http/protobuf", "grpc": "grpc"}

// otlpDefaultEndpoints are the OTLP exporters' default endpoints, where
// upstream's go to without OTEL_EXPORTER_OTLP_ENDPOINT.
var otlpDefaultEndpoints = map[string]string{"http": "http://localhost:4318", "grpc": "http://localhost:4317"}

// tracing translates TRACING_*: with TRACING_ENABLED=true, traces go over
// OTLP as upstream sends them, to $OTEL_EXPORTER_OTLP_ENDPOINT (which the
// exporter reads itself, and which alone turns traces on, as the
// OpenTelemetry standard has it) or to the protocol's default endpoint.
func (r *reader) tracing() {
	if !r.boolean("TRACING_ENABLED") {
		return
	}
	proto := strings.ToLower(r.str("TRACING_EXPORTER_PROTOCOL"))
	p, ok := otlpProtocols[proto]
	if !ok {
		r.fail(fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", r.str("TRACING_EXPORTER_PROTOCOL")))
		return
	}
	r.flag("otlp-protocol", p, "TRACING_EXPORTER_PROTOCOL")
	if !r.set("OTEL_EXPORTER_OTLP_ENDPOINT") {
		r.flag("otlp-endpoint", otlpDefaultEndpoints[proto], "TRACING_ENABLED")
	}
	rate := r.str("TRACING_SAMPLING_RATE")
	if f, err := strconv.ParseFloat(rate, 64); err != nil || !(f >= 0 && f <= 1) {
		r.fail(fmt.Errorf("TRACING_SAMPLING_RATE=%q: want a fraction in [0, 1]", rate))
	}
	r.flag("trace-sample-ratio", rate, "TRACING_SAMPLING_RATE")
	r.flag("trace-service-name", r.str("TRACING_SERVICE_NAME"), "TRACING_SERVICE_NAME")
}
