package tracing

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Protocols of OTLP export.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config says whether and where traces go. Its zero value, with none of
// the OpenTelemetry environment variables below set, is off.
//
// Each field set wins over the environment; an unset one is read from the
// standard OpenTelemetry variables, as every OpenTelemetry SDK reads them:
//
//   - tracing is on when Endpoint is set, or $OTEL_TRACES_EXPORTER is
//     otlp, or $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
//     $OTEL_EXPORTER_OTLP_ENDPOINT is set and $OTEL_TRACES_EXPORTER is not
//     none (OTEL_TRACES_EXPORTER=none turns off what only the
//     environment turned on);
//   - the protocol is $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
//     $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf (the specification's
//     default);
//   - the sampler is $OTEL_TRACES_SAMPLER and $OTEL_TRACES_SAMPLER_ARG
//     (default parentbased_always_on);
//   - the service name is $OTEL_SERVICE_NAME, else ratelimitd; other
//     resource attributes come from $OTEL_RESOURCE_ATTRIBUTES;
//   - the exporter itself reads the rest: the endpoint when Endpoint is
//     empty, headers, TLS certificates, compression and timeout
//     ($OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, ..._CERTIFICATE, ...).
type Config struct {
	// Endpoint is the collector's URL, as $OTEL_EXPORTER_OTLP_ENDPOINT
	// takes it: scheme, host and port (http:// for plain text, https://
	// for TLS); over http/protobuf, traces go to its path plus /v1/traces.
	Endpoint string
	// Protocol is grpc or http/protobuf ("": from the environment).
	Protocol string
	// SampleRatio, when set, samples that fraction of the traces that
	// start here and follows the caller's decision for the others
	// (parentbased_traceidratio); unset: from the environment.
	SampleRatio Ratio
	// ServiceName is the resource's service.name ("": from the
	// environment, else ratelimitd).
	ServiceName string
}

// settings is a Config resolved against the environment.
type settings struct {
	on          bool
	endpoint    string // "" for the exporter's own reading of the environment
	protocol    string
	sampleRatio Ratio // unset: the SDK reads the sampler from the environment
	serviceName string
}

// resolve applies getenv's OpenTelemetry variables to what c leaves unset.
func (c Config) resolve(getenv func(string) string) (settings, error) {
	s := settings{endpoint: c.Endpoint, protocol: c.Protocol, sampleRatio: c.SampleRatio, serviceName: c.ServiceName}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "otlp":
		s.on = true
	case "", "none":
		s.on = exporter == "" && (getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "")
	default:
		return s, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: ratelimitd exports traces over otlp, or none", exporter)
	}
	if c.Endpoint != "" {
		s.on = true
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, fmt.Errorf("--otlp-endpoint %q: want a URL, http://host:port or https://host:port", c.Endpoint)
		}
	}
	if s.protocol == "" {
		s.protocol = firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch s.protocol {
	case "":
		s.protocol = ProtocolHTTP
	case ProtocolGRPC, ProtocolHTTP:
	default:
		return s, fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf", s.protocol)
	}
	if s.serviceName == "" {
		s.serviceName = getenv("OTEL_SERVICE_NAME")
	}
	if s.serviceName == "" {
		s.serviceName = "ratelimitd"
	}
	return s, nil
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// Ratio is a sampling ratio in [0, 1], or unset (the zero value). It is a
// flag.Value.
type Ratio struct {
	v   float64
	set bool
}

// RatioOf returns the ratio r, set.
func RatioOf(r float64) Ratio { return Ratio{r, true} }

// Set parses a fraction in [0, 1].
func (r *Ratio) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return fmt.Errorf("want a fraction in [0, 1]")
	}
	*r = Ratio{v, true}
	return nil
}

// String returns the ratio, or "" when unset.
func (r *Ratio) String() string {
	if r == nil || !r.set {
		return ""
	}
	return strconv.FormatFloat(r.v, 'g', -1, 64)
}
