package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/policy/xdspolicy"
)

// xdsFlags are the flags of the policy over xDS that need work after
// parsing; the rest write into cfg directly.
type xdsFlags struct {
	tls                                   bool
	tlsCA, tlsCert, tlsKey, tlsServerName string
	headers                               string
}

func addXDSFlags(fs *flag.FlagSet, cfg *daemon.Config) *xdsFlags {
	f := &xdsFlags{}
	x := &cfg.XDS
	fs.StringVar(&x.Server, "xds-server", "", "take the policy from this xDS control plane, `host:port` (RateLimitConfig resources over state-of-the-world ADS, as Envoy Gateway serves them; see docs/envoy-gateway.md), instead of --config")
	fs.StringVar(&x.NodeID, "xds-node-id", "default", "node `id` to subscribe as (--xds-server)")
	fs.BoolVar(&cfg.StartWithoutPolicy, "xds-start-without-policy", false, "before the first policy from --xds-server, decide every call as for an unknown domain (allowed, unmatched) instead of refusing it; readiness waits for the policy either way")
	fs.BoolVar(&f.tls, "xds-tls", false, "connect to --xds-server over TLS, trusting the system's roots (or --xds-tls-ca)")
	fs.StringVar(&f.tlsCA, "xds-tls-ca", "", "PEM CA certificates `file` to trust for --xds-server (implies --xds-tls)")
	fs.StringVar(&f.tlsCert, "xds-tls-cert", "", "PEM client certificate `file` for --xds-server (with --xds-tls-key; implies --xds-tls); read again at each connection")
	fs.StringVar(&f.tlsKey, "xds-tls-key", "", "PEM private key `file` of --xds-tls-cert")
	fs.StringVar(&f.tlsServerName, "xds-tls-server-name", "", "`name` to verify --xds-server's certificate by, instead of its host")
	fs.StringVar(&f.headers, "xds-headers", "", "gRPC metadata to send to --xds-server, `key:value,...`")
	x.InitialBackoff, x.MaxBackoff = xdspolicy.DefaultInitialBackoff, xdspolicy.DefaultMaxBackoff
	fs.Var((*positiveDuration)(&x.InitialBackoff), "xds-backoff-initial", "wait before connecting to --xds-server again after a broken stream; doubled after each failure (a positive `duration`)")
	fs.Var((*positiveDuration)(&x.MaxBackoff), "xds-backoff-max", "longest wait before connecting to --xds-server again (a positive `duration`)")
	fs.Var((*messageBytes)(&x.MaxMessageBytes), "xds-max-message-bytes", "largest response from --xds-server, in `bytes`, at most 67108864 (64 MiB; 0: gRPC's default, 4 MiB)")
	return f
}

// apply fills cfg.XDS from the flags that need work.
func (f *xdsFlags) apply(cfg *daemon.Config) error {
	if cfg.XDS.Server == "" {
		if f.tls || f.tlsCA != "" || f.tlsCert != "" || f.headers != "" {
			return errors.New("--xds-tls*, --xds-headers: give --xds-server")
		}
		return nil
	}
	if f.headers != "" {
		cfg.XDS.Headers = map[string]string{}
		for _, kv := range strings.Split(f.headers, ",") {
			k, v, ok := strings.Cut(kv, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return fmt.Errorf("--xds-headers: %q is not key:value", kv)
			}
			cfg.XDS.Headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if f.tls || f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" {
		c, err := xdspolicy.ClientTLS(f.tlsCA, f.tlsCert, f.tlsKey, f.tlsServerName)
		if err != nil {
			return err
		}
		cfg.XDS.TLS = c
	}
	return nil
}
