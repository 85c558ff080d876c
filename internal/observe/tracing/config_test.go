package tracing

import (
	"strings"
	"testing"
)

// TestResolve: which settings the flags and the standard OTEL_*
// environment give, flags winning, and the mistakes refused naming what
// was wrong.
func TestResolve(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     Config
		env     map[string]string
		want    settings
		wantErr string
	}{
		{name: "nothing: off", want: settings{protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "the flag", cfg: Config{Endpoint: "http://otel:4318"},
			want: settings{on: true, endpoint: "http://otel:4318", protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "the OTLP endpoint variable", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"},
			want: settings{on: true, protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "the traces' own endpoint variable", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://otel:4318/v1/traces"},
			want: settings{on: true, protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "OTEL_TRACES_EXPORTER=otlp, the default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			want: settings{on: true, protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "OTEL_TRACES_EXPORTER=none wins over the environment's endpoint",
			env:  map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"},
			want: settings{protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "the flag wins over OTEL_TRACES_EXPORTER=none", cfg: Config{Endpoint: "https://otel:4317"},
			env:  map[string]string{"OTEL_TRACES_EXPORTER": "none"},
			want: settings{on: true, endpoint: "https://otel:4317", protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "protocol: traces' variable first",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			want: settings{protocol: ProtocolGRPC, serviceName: "ratelimitd"}},
		{name: "protocol: the flag wins", cfg: Config{Protocol: ProtocolHTTP}, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want: settings{protocol: ProtocolHTTP, serviceName: "ratelimitd"}},
		{name: "service name from the environment", env: map[string]string{"OTEL_SERVICE_NAME": "edge"},
			want: settings{protocol: ProtocolHTTP, serviceName: "edge"}},
		{name: "service name: the flag wins", cfg: Config{ServiceName: "mine"}, env: map[string]string{"OTEL_SERVICE_NAME": "edge"},
			want: settings{protocol: ProtocolHTTP, serviceName: "mine"}},
		{name: "a sample ratio", cfg: Config{SampleRatio: RatioOf(0.25)},
			want: settings{protocol: ProtocolHTTP, serviceName: "ratelimitd", sampleRatio: RatioOf(0.25)}},
		{name: "an endpoint without a scheme", cfg: Config{Endpoint: "otel:4317"}, wantErr: "--otlp-endpoint"},
		{name: "another exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER=zipkin"},
		{name: "another protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: `"http/json"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.resolve(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("resolve = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestRatio: a fraction in [0, 1], nothing else.
func TestRatio(t *testing.T) {
	for _, s := range []string{"0", "0.5", "1"} {
		var r Ratio
		if err := r.Set(s); err != nil || r.String() != s {
			t.Errorf("Set(%q): %v, String %q", s, err, r.String())
		}
	}
	for _, s := range []string{"-0.1", "1.5", "NaN", "half"} {
		var r Ratio
		if err := r.Set(s); err == nil {
			t.Errorf("Set(%q) accepted", s)
		}
	}
}
