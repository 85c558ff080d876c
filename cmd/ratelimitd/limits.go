package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/transport/readpace"
)

// surfaceFlags are the flags of the admin address, the allowed hosts and
// the limits on what a caller holds before it is authorized
// (daemon.Limits).
type surfaceFlags struct {
	allowedHosts   string
	maxHeaderBytes byteSize
	pacedReadRate  byteSize
}

// addSurfaceFlags adds the flags of --admin-addr, --allowed-hosts and
// daemon.Limits, with daemon.DefaultLimits as defaults.
func addSurfaceFlags(fs *flag.FlagSet, cfg *daemon.Config) *surfaceFlags {
	f := &surfaceFlags{maxHeaderBytes: byteSize(daemon.DefaultLimits.MaxHeaderBytes), pacedReadRate: byteSize(daemon.DefaultLimits.PacedReadRate)}
	l := &cfg.Limits
	*l = daemon.DefaultLimits
	fs.StringVar(&cfg.AdminAddr, "admin-addr", envOr("RATELIMITD_ADMIN_ADDR", ""), "listen `address` of the operator's surface (/metrics, /policies, /console, /debug/pprof/): --http-addr then serves only the decision APIs and the probes (default: all on --http-addr; required with --authz-policy; $RATELIMITD_ADMIN_ADDR, when set, is the default)")
	fs.StringVar(&f.allowedHosts, "allowed-hosts", "", "comma-separated host `names` the HTTP ports answer to besides IP addresses, localhost and the names in --http-addr/--admin-addr; other Host headers are refused (421) against DNS rebinding; * for any")
	fs.IntVar(&l.MaxConnections, "max-connections", l.MaxConnections, "most connections open on each port (gRPC, HTTP, admin); beyond, a new one closes the one idle longest, or is closed when every one is busy")
	fs.Func("grpc-max-streams", fmt.Sprintf("most concurrent calls on one gRPC connection (advertised; more are refused) (default %d)", l.MaxConcurrentStreams), func(s string) error {
		var n uint32
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			return fmt.Errorf("want a whole number of at least 1")
		}
		l.MaxConcurrentStreams = n
		return nil
	})
	fs.IntVar(&l.MaxWaitingStreams, "grpc-max-waiting", l.MaxWaitingStreams, "most gRPC calls, all connections together, waiting for their request message; one more ends the oldest waiting on the connection with the most waiting (bounds the bytes buffered before authorization: this times the largest request the --max-* bounds allow)")
	fs.IntVar(&l.MaxWaitingBodies, "http-max-waiting", l.MaxWaitingBodies, "most HTTP decision calls, all connections together, whose body is on its way; one more cuts off the one read longest (bounds the bytes buffered before authorization: this times the 4 MiB body limit)")
	fs.IntVar(&l.MaxLongStreams, "grpc-max-long-streams", l.MaxLongStreams, "most gRPC streams that last as long as their client wants (health Watch, quota streams, reflection), all callers together; one more ends the oldest of the caller holding the most, if it holds more than the new one's caller, else is refused (such streams never make a connection busy for --max-connections)")
	fs.IntVar(&l.MaxLongStreamsPerCaller, "grpc-max-long-streams-per-caller", l.MaxLongStreamsPerCaller, "most long-lived gRPC streams (--grpc-max-long-streams) of one caller, every connection together (a caller: an IPv4 address or an IPv6 /64); more are refused")
	fs.IntVar(&l.MaxLongStreamsPerConn, "grpc-max-long-streams-per-conn", l.MaxLongStreamsPerConn, "most long-lived gRPC streams (--grpc-max-long-streams) on one connection; more are refused")
	fs.Var(&f.pacedReadRate, "grpc-paced-read-rate", fmt.Sprintf("most `bytes` a second read from the gRPC connections one of whose calls was ended waiting for its message (--grpc-max-waiting, --message-timeout) in the last %v, and from the connections their address opens meanwhile (at most %d of one address), all together, each its equal share; each new call on one costs it %d KiB of its share (KiB, MiB); other connections are read unpaced", daemon.PacedQuiet, readpace.MaxPacedPerSource, readpace.StreamCost>>10))
	fs.DurationVar(&l.MessageTimeout, "message-timeout", l.MessageTimeout, "how long a gRPC call's request message, or an HTTP request's body, may take to arrive after its headers")
	fs.DurationVar(&l.HeaderTimeout, "header-timeout", l.HeaderTimeout, "how long a new connection may take to send its first request's headers (gRPC: the TLS handshake and HTTP/2 preface)")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", l.IdleTimeout, "close a connection with no call in progress for this long (gRPC: GOAWAY; HTTP keep-alive)")
	fs.DurationVar(&l.KeepaliveTime, "grpc-keepalive-time", l.KeepaliveTime, "ping a gRPC connection silent for this long; close it if the ping is unanswered for --grpc-keepalive-timeout")
	fs.DurationVar(&l.KeepaliveTimeout, "grpc-keepalive-timeout", l.KeepaliveTimeout, "how long a keepalive ping may go unanswered before the connection is closed")
	fs.DurationVar(&l.KeepaliveMinTime, "grpc-keepalive-min-time", l.KeepaliveMinTime, "the shortest interval at which clients may ping; a client pinging more often is disconnected (GOAWAY ENHANCE_YOUR_CALM)")
	fs.Var(&f.maxHeaderBytes, "max-header-bytes", "largest request header, HTTP and gRPC (KiB, MiB)")
	return f
}

// apply sets what the flags parsed into cfg, or says which flag is out of
// range (the daemon would read a zero as "the default").
func (f *surfaceFlags) apply(cfg *daemon.Config) error {
	if f.allowedHosts != "" {
		for _, h := range strings.Split(f.allowedHosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				cfg.AllowedHosts = append(cfg.AllowedHosts, h)
			}
		}
	}
	cfg.Limits.MaxHeaderBytes = int(f.maxHeaderBytes)
	cfg.Limits.PacedReadRate = int(f.pacedReadRate)
	l := cfg.Limits
	for _, c := range []struct {
		flag string
		n    int
	}{{"--max-connections", l.MaxConnections}, {"--grpc-max-waiting", l.MaxWaitingStreams}, {"--http-max-waiting", l.MaxWaitingBodies},
		{"--grpc-max-long-streams", l.MaxLongStreams}, {"--grpc-max-long-streams-per-caller", l.MaxLongStreamsPerCaller}, {"--grpc-max-long-streams-per-conn", l.MaxLongStreamsPerConn}} {
		if c.n < 1 {
			return fmt.Errorf("%s %d: want at least 1", c.flag, c.n)
		}
	}
	for _, c := range []struct {
		flag string
		d    time.Duration
	}{
		{"--message-timeout", l.MessageTimeout}, {"--header-timeout", l.HeaderTimeout}, {"--idle-timeout", l.IdleTimeout},
		{"--grpc-keepalive-time", l.KeepaliveTime}, {"--grpc-keepalive-timeout", l.KeepaliveTimeout}, {"--grpc-keepalive-min-time", l.KeepaliveMinTime},
	} {
		if c.d <= 0 {
			return fmt.Errorf("%s %v: want a positive duration", c.flag, c.d)
		}
	}
	return nil
}
