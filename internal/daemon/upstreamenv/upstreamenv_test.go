package upstreamenv_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/daemon/upstreamenv"
)

func env(m map[string]string) upstreamenv.Env {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// envoyGateway is the environment Envoy Gateway's deployment gives the
// service, with Redis and Prometheus on (envoyproxy/gateway,
// internal/infrastructure/kubernetes/ratelimit/resource.go).
func envoyGateway() map[string]string {
	return map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis-system.svc.cluster.local:6379",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
	}
}

func flags(tr upstreamenv.Translation) map[string]string {
	m := map[string]string{}
	for _, f := range tr.Flags {
		m[f.Name] = f.Value
	}
	return m
}

func TestEnvoyGatewayDeployment(t *testing.T) {
	tr, err := upstreamenv.Translate(env(envoyGateway()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"http-addr": "0.0.0.0:8080", "grpc-addr": "0.0.0.0:8081",
		"tls-cert": "/certs/tls.crt", "tls-key": "/certs/tls.key",
		"log-level": "info", "log-format": "text",
		"xds-server": "envoy-gateway:18001", "xds-node-id": "envoy-ratelimit", "xds-start-without-policy": "true",
		"xds-backoff-initial": "3s", "xds-backoff-max": "1m0s",
		"xds-tls": "true", "xds-tls-cert": "/certs/tls.crt", "xds-tls-key": "/certs/tls.key", "xds-tls-ca": "/certs/ca.crt",
		"metrics-addr": ":19001", "metrics-path": "/metrics", "upstream-metric-names": "true",
		"store": "redis", "redis-addr": "redis.redis-system.svc.cluster.local:6379", "redis-timeout": "10s",
		"near-limit-ratio": "0.8", "shadow-mode": "false", "healthcheck-needs-policy": "false",
		"overdraft-by-default": "true", // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset: upstream counts past the limit
	}
	if got := flags(tr); !mapsEqual(got, want) {
		t.Errorf("flags:\n got %v\nwant %v", got, want)
	}
	// No client CA: upstream reads GRPC_CLIENT_TLS_CACERT, which Envoy
	// Gateway does not set (its GRPC_SERVER_TLS_CA_CERT is no setting of
	// upstream's), so neither asks for client certificates.
	if len(tr.Warnings) != 1 || !strings.HasPrefix(tr.Warnings[0], `PROMETHEUS_MAPPER_YAML="/etc/statsd-exporter/conf.yaml" is ignored`) {
		t.Errorf("warnings %q, want only PROMETHEUS_MAPPER_YAML's", tr.Warnings)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestFileConfigAndRedis(t *testing.T) {
	tr, err := upstreamenv.Translate(env(map[string]string{
		"RUNTIME_ROOT": "/srv/runtime", "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": "r1:6379,r2:6379", "REDIS_AUTH": "app:s3cret",
		"REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem", "REDIS_TIMEOUT": "250ms", "CACHE_KEY_PREFIX": "rl_",
		"LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json", "PORT": "9080", "GRPC_PORT": "9081", "HOST": "127.0.0.1",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "SHADOW_MODE": "true", "NEAR_LIMIT_RATIO": "0.9",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := flags(tr)
	for k, v := range map[string]string{
		"config": "/srv/runtime/ratelimit/config", "redis-cluster": "r1:6379,r2:6379", "redis-username": "app",
		"redis-tls": "true", "redis-tls-ca": "/ca.pem", "redis-timeout": "250ms", "redis-key-prefix": "rl_",
		"log-level": "debug", "log-format": "json", "http-addr": "127.0.0.1:9080", "grpc-addr": "0.0.0.0:9081",
		"response-headers": "legacy", "shadow-mode": "true", "near-limit-ratio": "0.9", "healthcheck-needs-policy": "true",
		"overdraft-by-default": "false", // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true
	} {
		if got[k] != v {
			t.Errorf("--%s=%q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["xds-server"]; ok {
		t.Error("xDS flags with CONFIG_TYPE=FILE")
	}
	if tr.RedisPassword != "s3cret" {
		t.Errorf("password %q, want s3cret", tr.RedisPassword)
	}
	for _, f := range tr.Flags {
		if strings.Contains(f.Value, "s3cret") {
			t.Errorf("the password is in a flag: %v", f)
		}
	}
}

func TestUpstreamDefaultsAreRefusedForTheirUnixSocket(t *testing.T) {
	_, err := upstreamenv.Translate(env(nil))
	if err == nil || !strings.Contains(err.Error(), `REDIS_SOCKET_TYPE="unix" (upstream's default is unix)`) {
		t.Errorf("error %v, want REDIS_SOCKET_TYPE refused", err)
	}
}

// base is a valid environment that sets nothing the loops below set.
func base() map[string]string {
	return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "USE_STATSD": "false"}
}

// value returns a value for v other than its default, that upstream would
// parse.
func value(v upstreamenv.Variable) string {
	switch {
	case v.Name == "RUNTIME_IGNOREDOTFILES" || v.Name == "RUNTIME_WATCH_ROOT":
		return "false"
	case v.Default == "true":
		return "false"
	case v.Default == "false":
		return "true"
	case v.Name == "GRPC_UDS" || v.Name == "GRPC_CLIENT_TLS_SAN":
		return "/x"
	}
	return "7"
}

func TestEveryIgnoredVariableWarns(t *testing.T) {
	for _, v := range upstreamenv.Variables {
		if v.Use != upstreamenv.Ignored {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			e := base()
			e[v.Name] = value(v)
			if v.Name == "USE_STATSD" || v.Name == "USE_DOG_STATSD" {
				e[v.Name] = "true"
			}
			tr, err := upstreamenv.Translate(env(e))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(tr.Warnings, func(w string) bool { return strings.HasPrefix(w, v.Name+"=") }) {
				t.Errorf("%s=%s: warnings %q, want one naming it", v.Name, e[v.Name], tr.Warnings)
			}
		})
	}
}

func TestEveryRefusedVariableFails(t *testing.T) {
	for _, v := range upstreamenv.Variables {
		if v.Use != upstreamenv.Refused {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			e := base()
			e[v.Name] = value(v)
			switch v.Name {
			case "GRPC_CLIENT_TLS_SAN":
				e["GRPC_SERVER_USE_TLS"], e["GRPC_SERVER_TLS_CERT"], e["GRPC_SERVER_TLS_KEY"] = "true", "/c", "/k"
			case "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION":
				e["REDIS_TLS"] = "true"
			}
			if _, err := upstreamenv.Translate(env(e)); err == nil || !strings.HasPrefix(err.Error(), v.Name+"=") && !strings.HasPrefix(err.Error(), v.Name+":") {
				t.Errorf("%s=%s: error %v, want one naming it", v.Name, e[v.Name], err)
			}
		})
	}
}

func TestBadValuesAreRefused(t *testing.T) {
	for name, bad := range map[string]string{
		"PORT": "http", "GRPC_SERVER_USE_TLS": "yes please", "CONFIG_TYPE": "GRPC_XDS_DELTA", "LOG_LEVEL": "loud",
		"LOG_FORMAT": "xml", "NEAR_LIMIT_RATIO": "2", "BACKEND_TYPE": "memcache", "REDIS_TYPE": "MEMCACHE", "REDIS_TIMEOUT": "10",
	} {
		e := base()
		e[name] = bad
		if _, err := upstreamenv.Translate(env(e)); err == nil || !strings.HasPrefix(err.Error(), name+"=") {
			t.Errorf("%s=%q: error %v, want one naming it", name, bad, err)
		}
	}
}

// TestDocumentedTable holds docs/envoy-gateway.md's table of variables to
// Variables: each variable has a row, saying what Variables says.
func TestDocumentedTable(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/envoy-gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\| [^|]* \\| \\*\\*(honoured|ignored|refused)\\*\\*")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[2]
	}
	for _, v := range upstreamenv.Variables {
		if got, ok := documented[v.Name]; !ok {
			t.Errorf("docs/envoy-gateway.md has no row for %s", v.Name)
		} else if got != string(v.Use) {
			t.Errorf("docs/envoy-gateway.md says %s is %s; it is %s", v.Name, got, v.Use)
		}
		delete(documented, v.Name)
	}
	for name := range documented {
		t.Errorf("docs/envoy-gateway.md documents %s, which is no variable of upstream's", name)
	}
}

// TestTracing: TRACING_ENABLED=true sends traces as upstream does: to the
// protocol's default endpoint unless OTEL_EXPORTER_OTLP_ENDPOINT names one
// (the exporter reads it itself), sampled at TRACING_SAMPLING_RATE, under
// TRACING_SERVICE_NAME; off, the TRACING_* variables do nothing.
func TestTracing(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"off", map[string]string{"TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.1"}, map[string]string{}},
		{"on, upstream's defaults", map[string]string{"TRACING_ENABLED": "true"}, map[string]string{
			"otlp-protocol": "http/protobuf", "otlp-endpoint": "http://localhost:4318", "trace-sample-ratio": "1", "trace-service-name": "RateLimit"}},
		{"grpc to a collector", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4317",
			"TRACING_SAMPLING_RATE": "0.25", "TRACING_SERVICE_NAME": "edge"}, map[string]string{
			"otlp-protocol": "grpc", "trace-sample-ratio": "0.25", "trace-service-name": "edge"}},
		{"grpc, the default endpoint", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc"}, map[string]string{
			"otlp-protocol": "grpc", "otlp-endpoint": "http://localhost:4317", "trace-sample-ratio": "1", "trace-service-name": "RateLimit"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := base()
			for k, v := range tt.env {
				e[k] = v
			}
			tr, err := upstreamenv.Translate(env(e))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range flags(tr) {
				if strings.HasPrefix(k, "otlp-") || strings.HasPrefix(k, "trace-") {
					got[k] = v
				}
			}
			if !mapsEqual(got, tt.want) {
				t.Errorf("flags %v, want %v", got, tt.want)
			}
		})
	}
	for name, bad := range map[string]string{"TRACING_EXPORTER_PROTOCOL": "zipkin", "TRACING_SAMPLING_RATE": "2"} {
		e := base()
		e["TRACING_ENABLED"], e[name] = "true", bad
		if _, err := upstreamenv.Translate(env(e)); err == nil || !strings.HasPrefix(err.Error(), name+"=") {
			t.Errorf("%s=%q: error %v, want one naming it", name, bad, err)
		}
	}
}

// TestRedisSentinel: REDIS_TYPE=SENTINEL (any case, as upstream) reads
// REDIS_URL as the master's name and the sentinels' addresses, and
// REDIS_SENTINEL_AUTH as the sentinels' password.
func TestRedisSentinel(t *testing.T) {
	e := base()
	e["BACKEND_TYPE"], e["REDIS_SOCKET_TYPE"], e["REDIS_TYPE"] = "redis", "tcp", "sentinel"
	e["REDIS_URL"], e["REDIS_SENTINEL_AUTH"], e["REDIS_AUTH"] = "mymaster,s1:26379,s2:26379", "sentinel-secret", "redis-secret"
	tr, err := upstreamenv.Translate(env(e))
	if err != nil {
		t.Fatal(err)
	}
	f := flags(tr)
	if f["redis-sentinel"] != "mymaster" || f["redis-addr"] != "s1:26379,s2:26379" || tr.RedisSentinelPassword != "sentinel-secret" || tr.RedisPassword != "redis-secret" {
		t.Errorf("flags %v, passwords %q %q", f, tr.RedisSentinelPassword, tr.RedisPassword)
	}
	for _, w := range tr.Warnings {
		if strings.HasPrefix(w, "REDIS_SENTINEL_AUTH") {
			t.Errorf("warning %q: the sentinel password is used", w)
		}
	}
	e["REDIS_URL"] = "s1:26379"
	if _, err := upstreamenv.Translate(env(e)); err == nil || !strings.HasPrefix(err.Error(), "REDIS_URL=") {
		t.Errorf("REDIS_URL without the master's name: %v, want an error naming REDIS_URL", err)
	}
}

// TestValuesReachTheirFlags: a variable's value that parses goes to its
// flag as it is — zero, negative or huge — never dropped for the flag's
// default; the flag's own check decides (cmd/ratelimitd's
// TestUpstreamEnvRefusesWhatFlagsRefuse).
func TestValuesReachTheirFlags(t *testing.T) {
	xds := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}
	for _, tt := range []struct {
		name, value string
		more        map[string]string
		flag, want  string
	}{
		{"REDIS_TIMEOUT", "0s", nil, "redis-timeout", "0s"},
		{"REDIS_TIMEOUT", "-1s", nil, "redis-timeout", "-1s"},
		{"REDIS_TIMEOUT", "0", nil, "redis-timeout", "0s"},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "0s", xds, "xds-backoff-initial", "0s"},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "-3s", xds, "xds-backoff-initial", "-3s"},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "0", xds, "xds-backoff-max", "0s"},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "100000000000000", xds, "xds-max-message-bytes", "100000000000000"},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1", xds, "xds-max-message-bytes", "-1"},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "0", xds, "xds-max-message-bytes", "0"},
	} {
		e := base()
		for k, v := range tt.more {
			e[k] = v
		}
		e[tt.name] = tt.value
		tr, err := upstreamenv.Translate(env(e))
		if err != nil {
			t.Errorf("%s=%s: %v", tt.name, tt.value, err)
			continue
		}
		i := slices.IndexFunc(tr.Flags, func(f upstreamenv.Flag) bool { return f.Name == tt.flag })
		if i < 0 || tr.Flags[i].Value != tt.want || tr.Flags[i].From != tt.name {
			t.Errorf("%s=%s: flags %+v, want --%s=%s from %s", tt.name, tt.value, tr.Flags, tt.flag, tt.want, tt.name)
		}
	}
}
