package main

import (
	"flag"

	"github.com/ratelimitd/ratelimitd/internal/observe/tracing"
)

// addTracingFlags adds the flags of OpenTelemetry traces; each wins over
// its OTEL_* environment variable (internal/observe/tracing.Config).
func addTracingFlags(fs *flag.FlagSet, c *tracing.Config) {
	fs.StringVar(&c.Endpoint, "otlp-endpoint", "", "send traces over OTLP to this collector `URL` (http://host:port, https:// for TLS), a span per decision (docs/operations.md); default: off, unless $OTEL_EXPORTER_OTLP_ENDPOINT, $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_TRACES_EXPORTER=otlp turns traces on")
	fs.StringVar(&c.Protocol, "otlp-protocol", "", "OTLP `protocol`: grpc or http/protobuf (default: $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	fs.Var(&c.SampleRatio, "trace-sample-ratio", "sample this `fraction` of the traces that start here, following the caller's traceparent for the rest (default: $OTEL_TRACES_SAMPLER and $OTEL_TRACES_SAMPLER_ARG, else every trace)")
	fs.StringVar(&c.ServiceName, "trace-service-name", "", "the traces' service.`name` (default: $OTEL_SERVICE_NAME, else ratelimitd)")
}
