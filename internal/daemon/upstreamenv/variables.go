package upstreamenv

// Variable is one setting of envoyproxy/ratelimit (src/settings/settings.go).
type Variable struct {
	Name string
	// Default is upstream's default, "" for none.
	Default string
	// Use is what ratelimitd does with it.
	Use Use
}

// Variables are every variable of upstream's settings, with upstream's
// default and what ratelimitd does with it. docs/envoy-gateway.md has the
// same table, with the flag or the reason of each.
var Variables = []Variable{
	{"HOST", "0.0.0.0", Honoured},
	{"PORT", "8080", Honoured},
	{"DEBUG_HOST", "0.0.0.0", Ignored},
	{"DEBUG_PORT", "6070", Ignored},
	{"GRPC_UDS", "", Refused},
	{"GRPC_HOST", "0.0.0.0", Honoured},
	{"GRPC_PORT", "8081", Honoured},
	{"GRPC_MAX_CONNECTION_AGE", "24h", Ignored},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", Ignored},
	{"GRPC_SERVER_USE_TLS", "false", Honoured},
	{"GRPC_SERVER_TLS_CERT", "", Honoured},
	{"GRPC_SERVER_TLS_KEY", "", Honoured},
	{"GRPC_CLIENT_TLS_CACERT", "", Honoured},
	{"GRPC_CLIENT_TLS_SAN", "", Refused},
	{"LOG_LEVEL", "WARN", Honoured},
	{"LOG_FORMAT", "text", Honoured},
	{"CONFIG_TYPE", "FILE", Honoured},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", Honoured},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", Honoured},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", Ignored},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", Honoured},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", Honoured},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", Honoured},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", Honoured},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", Honoured},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", Honoured},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", Honoured},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", Honoured},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", Ignored},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", Honoured},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", Ignored},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", Ignored},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", Honoured},
	{"USE_DOG_STATSD", "false", Ignored},
	{"USE_DOG_STATSD_MOGRIFIERS", "", Ignored},
	{"USE_STATSD", "true", Ignored},
	{"STATSD_HOST", "localhost", Ignored},
	{"STATSD_PORT", "8125", Ignored},
	{"EXTRA_TAGS", "", Ignored},
	{"STATS_FLUSH_INTERVAL", "10s", Ignored},
	{"DISABLE_STATS", "false", Ignored},
	{"USE_PROMETHEUS", "false", Honoured},
	{"PROMETHEUS_ADDR", ":9090", Honoured},
	{"PROMETHEUS_PATH", "/metrics", Honoured},
	{"PROMETHEUS_MAPPER_YAML", "", Ignored},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", Honoured},
	{"RUNTIME_SUBDIRECTORY", "", Honoured},
	{"RUNTIME_APPDIRECTORY", "config", Honoured},
	{"RUNTIME_IGNOREDOTFILES", "false", Ignored},
	{"RUNTIME_WATCH_ROOT", "true", Ignored},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", Ignored},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", Ignored},
	{"NEAR_LIMIT_RATIO", "0.8", Honoured},
	{"CACHE_KEY_PREFIX", "", Honoured},
	{"BACKEND_TYPE", "redis", Honoured},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", Honoured},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", Honoured},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", Ignored},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", Ignored},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", Ignored},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", Honoured},
	{"REDIS_SOCKET_TYPE", "unix", Honoured},
	{"REDIS_TYPE", "SINGLE", Honoured},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", Honoured},
	{"REDIS_POOL_SIZE", "10", Ignored},
	{"REDIS_AUTH", "", Honoured},
	{"REDIS_TLS", "false", Honoured},
	{"REDIS_TLS_CLIENT_CERT", "", Honoured},
	{"REDIS_TLS_CLIENT_KEY", "", Honoured},
	{"REDIS_TLS_CACERT", "", Honoured},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", Refused},
	{"REDIS_PIPELINE_WINDOW", "0", Ignored},
	{"REDIS_PIPELINE_LIMIT", "0", Ignored},
	{"REDIS_USE_EXPLICIT_PIPELINE", "false", Ignored},
	{"REDIS_PERSECOND", "false", Refused},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", Ignored},
	{"REDIS_PERSECOND_TYPE", "SINGLE", Ignored},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", Ignored},
	{"REDIS_PERSECOND_POOL_SIZE", "10", Ignored},
	{"REDIS_PERSECOND_AUTH", "", Ignored},
	{"REDIS_PERSECOND_TLS", "false", Ignored},
	{"REDIS_SENTINEL_AUTH", "", Honoured},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", Ignored},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", Ignored},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", Ignored},
	{"REDIS_PERSECOND_USE_EXPLICIT_PIPELINE", "false", Ignored},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", Ignored},
	{"REDIS_TIMEOUT", "10s", Honoured},
	{"REDIS_PERSECOND_TIMEOUT", "10s", Ignored},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", Ignored},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", Ignored},
	{"MEMCACHE_HOST_PORT", "", Ignored},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", Ignored},
	{"MEMCACHE_SRV", "", Ignored},
	{"MEMCACHE_SRV_REFRESH", "0", Ignored},
	{"MEMCACHE_TLS", "false", Ignored},
	{"MEMCACHE_TLS_CLIENT_CERT", "", Ignored},
	{"MEMCACHE_TLS_CLIENT_KEY", "", Ignored},
	{"MEMCACHE_TLS_CACERT", "", Ignored},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", Ignored},
	{"SHADOW_MODE", "false", Honoured},
	{"RESPONSE_DYNAMIC_METADATA", "false", Honoured},
	{"MERGE_DOMAIN_CONFIG", "false", Refused},
	{"TRACING_ENABLED", "false", Honoured},
	{"TRACING_SERVICE_NAME", "RateLimit", Honoured},
	{"TRACING_SERVICE_NAMESPACE", "", Ignored},
	{"TRACING_SERVICE_INSTANCE_ID", "", Ignored},
	{"TRACING_EXPORTER_PROTOCOL", "http", Honoured},
	{"TRACING_SAMPLING_RATE", "1", Honoured},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "", Honoured},
}

var byName = func() map[string]Variable {
	m := make(map[string]Variable, len(Variables))
	for _, v := range Variables {
		m[v.Name] = v
	}
	return m
}()

// variable returns the variable called name; it panics for a name not in
// Variables, a mistake in this package.
func variable(name string) Variable {
	v, ok := byName[name]
	if !ok {
		panic("upstreamenv: no variable " + name)
	}
	return v
}
