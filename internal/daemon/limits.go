package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"

	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/transport/connlimit"
	"github.com/ratelimitd/ratelimitd/internal/transport/hostcheck"
	"github.com/ratelimitd/ratelimitd/internal/transport/recvlimit"
	"github.com/ratelimitd/ratelimitd/internal/transport/streamlimit"
)

// Limits bounds what a caller can make the daemon hold before its call is
// authorized and decided: connections, streams, the time and the bytes of
// a request on the way. A zero field takes its value from DefaultLimits.
type Limits struct {
	// MaxConnections is how many connections each port (gRPC, HTTP,
	// admin, metrics) holds open at once; with that many open, a new one closes the
	// connection idle longest, or is closed itself when none is idle
	// (internal/transport/connlimit). A gRPC connection is busy while a call of it
	// runs its handler (a long-lived stream does not count:
	// MaxLongStreams), an HTTP one from a request's first byte to its
	// answer.
	MaxConnections int
	// MaxConcurrentStreams is how many calls one gRPC connection may have
	// open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); a stream
	// beyond it is refused (REFUSED_STREAM).
	MaxConcurrentStreams uint32
	// MaxWaitingStreams is how many gRPC calls, on all connections
	// together, may be waiting for their request message at once; a call
	// beyond it ends the oldest waiting on the connection with the most
	// waiting (internal/transport/recvlimit). The bytes buffered for messages on the
	// way are at most this many times the largest request the bounds allow
	// (MaxMessageBytes).
	MaxWaitingStreams int
	// MaxWaitingBodies is how many HTTP request bodies of the decision
	// APIs may be on their way at once; one more cuts off the one read
	// longest (400, its connection closed). The bytes buffered for bodies
	// are at most this many times the body limit (httpapi's 4 MiB).
	MaxWaitingBodies int
	// MaxLongStreams, MaxLongStreamsPerCaller and MaxLongStreamsPerConn
	// bound the gRPC streams that last as long as their client wants (the
	// health service's Watch, Envoy's quota streams, reflection: every
	// streaming method of the gRPC server) in all, per caller (a source address:
	// internal/transport/source) and per connection. A stream beyond its caller's or
	// its connection's bound is refused (ResourceExhausted); with
	// MaxLongStreams held, a new one ends the oldest of the caller holding
	// the most, when that caller holds more than the new one's
	// (internal/transport/streamlimit). Such streams never make a connection busy
	// (MaxConnections).
	MaxLongStreams          int
	MaxLongStreamsPerCaller int
	MaxLongStreamsPerConn   int
	// PacedReadRate is how many bytes a second the daemon reads, all
	// together, from the gRPC connections that have shown themselves
	// abusive: a connection one of whose calls was ended waiting for its
	// message (MaxWaitingStreams, MessageTimeout) is read at most its equal
	// share of this until PacedQuiet passes without another such call, and
	// each new call on it costs readpace.StreamCost bytes of its share
	// (internal/transport/readpace). So is every connection its source (an IPv4
	// address, an IPv6 /64) opens meanwhile, from its first byte, and at
	// most readpace.MaxPacedPerSource of a source's connections are paced
	// at once (one more closes the one owing the most). Other connections
	// are read unpaced.
	PacedReadRate int
	// MessageTimeout is how long a gRPC call's request message may take to
	// arrive after its headers, and an HTTP request's body after its
	// header; a call whose message is late is ended.
	MessageTimeout time.Duration
	// HeaderTimeout is how long a new connection may take to say anything:
	// the gRPC port's TLS handshake and HTTP/2 preface
	// (grpc.ConnectionTimeout), an HTTP request's header
	// (http.Server.ReadHeaderTimeout).
	HeaderTimeout time.Duration
	// IdleTimeout closes a connection with no call in progress for this
	// long: gRPC's MaxConnectionIdle (with a GOAWAY) and HTTP keep-alive
	// connections (http.Server.IdleTimeout).
	IdleTimeout time.Duration
	// KeepaliveTime is how long a gRPC connection may be silent before
	// the daemon pings it; a ping unanswered for KeepaliveTimeout closes
	// it. Clients may ping at most every KeepaliveMinTime (with or without
	// calls), else the connection is closed (GOAWAY ENHANCE_YOUR_CALM).
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	KeepaliveMinTime time.Duration
	// MaxHeaderBytes bounds an HTTP request's header
	// (http.Server.MaxHeaderBytes) and a gRPC call's header list
	// (grpc.MaxHeaderListSize).
	MaxHeaderBytes int
}

// PacedQuiet is how long a gRPC connection stays paced
// (Limits.PacedReadRate) after the last of its calls ended waiting for its
// message.
const PacedQuiet = 30 * time.Second

// DefaultLimits are the limits a zero Limits field takes.
var DefaultLimits = Limits{
	MaxConnections:          1024,
	MaxConcurrentStreams:    100,
	MaxWaitingStreams:       96,
	MaxWaitingBodies:        16,
	MaxLongStreams:          2048,
	MaxLongStreamsPerCaller: 256,
	MaxLongStreamsPerConn:   16,
	PacedReadRate:           8 << 20,
	MessageTimeout:          10 * time.Second,
	HeaderTimeout:           10 * time.Second,
	IdleTimeout:             5 * time.Minute,
	KeepaliveTime:           time.Minute,
	KeepaliveTimeout:        20 * time.Second,
	KeepaliveMinTime:        10 * time.Second,
	MaxHeaderBytes:          64 << 10,
}

// withDefaults returns l with its zero fields set from DefaultLimits, or
// an error naming a negative one.
func (l Limits) withDefaults() (Limits, error) {
	d := DefaultLimits
	ints := []struct {
		name   string
		v, def *int
	}{
		{"max connections", &l.MaxConnections, &d.MaxConnections},
		{"max waiting streams", &l.MaxWaitingStreams, &d.MaxWaitingStreams},
		{"max waiting bodies", &l.MaxWaitingBodies, &d.MaxWaitingBodies},
		{"max long-lived streams", &l.MaxLongStreams, &d.MaxLongStreams},
		{"max long-lived streams per caller", &l.MaxLongStreamsPerCaller, &d.MaxLongStreamsPerCaller},
		{"max long-lived streams per connection", &l.MaxLongStreamsPerConn, &d.MaxLongStreamsPerConn},
		{"paced read rate", &l.PacedReadRate, &d.PacedReadRate},
		{"max header bytes", &l.MaxHeaderBytes, &d.MaxHeaderBytes},
	}
	for _, f := range ints {
		if *f.v < 0 {
			return l, fmt.Errorf("%s %d: want at least 1", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = d.MaxConcurrentStreams
	}
	durations := []struct {
		name   string
		v, def *time.Duration
	}{
		{"message timeout", &l.MessageTimeout, &d.MessageTimeout},
		{"header timeout", &l.HeaderTimeout, &d.HeaderTimeout},
		{"idle timeout", &l.IdleTimeout, &d.IdleTimeout},
		{"keepalive time", &l.KeepaliveTime, &d.KeepaliveTime},
		{"keepalive timeout", &l.KeepaliveTimeout, &d.KeepaliveTimeout},
		{"keepalive min time", &l.KeepaliveMinTime, &d.KeepaliveMinTime},
	}
	for _, f := range durations {
		if *f.v < 0 {
			return l, fmt.Errorf("%s %v: want a positive duration", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return l, nil
}

// MaxMessageBytes returns the size of the largest request message (either
// API) that b lets through, with room to spare for each field's tag and
// length and for a descriptor's limit and hits: the gRPC server refuses a
// larger message (ResourceExhausted) before reading it. With
// engine.DefaultBounds it is 1,361,152 bytes (1.30 MiB).
func MaxMessageBytes(b engine.Bounds) int {
	const (
		perEntry      = 16  // the entry's and its key's and value's tags and lengths
		perDescriptor = 256 // its tag and length, a limit (name aside), hits
		perRequest    = 1024
	)
	entry := perEntry + b.MaxKeyBytes + b.MaxValueBytes
	descriptor := perDescriptor + b.MaxKeyBytes + b.MaxEntries*entry // MaxKeyBytes: the limit's name
	return perRequest + b.MaxKeyBytes + b.MaxDescriptors*descriptor
}

// grpcLimits returns the gRPC server options that bound what a caller
// holds before its call runs: streams per connection, message size, the
// time to the message (with the tap that refuses unknown callers first,
// under an authorization policy), idle connections and keepalives.
func (d *Daemon) grpcLimits() []grpc.ServerOption {
	l := d.cfg.Limits
	taps := []tap.ServerInHandle{d.pacer.Tap, d.longStreams.Tap, d.waiting.Tap}
	if d.authz != nil {
		taps = []tap.ServerInHandle{d.pacer.Tap, d.authz.Tap, d.longStreams.Tap, d.waiting.Tap} // refuse before a place is taken
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(MaxMessageBytes(d.cfg.Bounds)),
		grpc.MaxHeaderListSize(uint32(l.MaxHeaderBytes)),
		grpc.ConnectionTimeout(l.HeaderTimeout),
		grpc.InTapHandle(chainTaps(taps)),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.IdleTimeout,
			Time:              l.KeepaliveTime,
			Timeout:           l.KeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
	}
}

// transportUnary and transportStream are the interceptors that run first
// on every gRPC call: the message has arrived (recvlimit), the connection
// is busy (connlimit; not for a long-lived stream), a long-lived stream
// ended to make room says so (streamlimit).
func (d *Daemon) transportUnary() []grpc.UnaryServerInterceptor {
	return []grpc.UnaryServerInterceptor{d.waiting.UnaryServerInterceptor(), d.grpcLis.UnaryServerInterceptor()}
}

func (d *Daemon) transportStream() []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{d.waiting.StreamServerInterceptor(), d.longStreams.StreamServerInterceptor(),
		d.grpcLis.StreamServerInterceptor(d.longStreams.LongLived)}
}

// newLongStreams returns the bounds of the long-lived streams, of no
// method yet (boundStreams adds them).
func (d *Daemon) newLongStreams() *streamlimit.Limiter {
	l := d.cfg.Limits
	return streamlimit.New(streamlimit.Bounds{Max: l.MaxLongStreams, PerCaller: l.MaxLongStreamsPerCaller, PerConn: l.MaxLongStreamsPerConn})
}

// boundStreams makes every streaming method g serves long-lived (the
// health service's Watch, Envoy's quota streams, reflection, and any a
// later version registers): each lasts as long as its client wants. Call
// it once every service is registered, before g serves.
func (d *Daemon) boundStreams(g *grpc.Server) {
	for service, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			if m.IsClientStream || m.IsServerStream {
				d.longStreams.Add("/" + service + "/" + m.Name)
			}
		}
	}
}

// chainTaps runs taps in order; the first error refuses the stream.
func chainTaps(taps []tap.ServerInHandle) tap.ServerInHandle {
	if len(taps) == 1 {
		return taps[0]
	}
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		var err error
		for _, t := range taps {
			if ctx, err = t(ctx, info); err != nil {
				return ctx, err
			}
		}
		return ctx, nil
	}
}

// httpServer returns an HTTP server for h on l, with the header, body and
// idle timeouts of the limits (the body's: MessageTimeout after the
// header) and l's connection states tracked, answering only the hosts
// allowedHosts names and no unsafe cross-origin request
// (internal/transport/hostcheck).
func (d *Daemon) httpServer(h http.Handler, l *connlimit.Listener) *http.Server {
	lim := d.cfg.Limits
	return &http.Server{
		Handler:           d.allowedHosts().Handler(h),
		ReadHeaderTimeout: lim.HeaderTimeout,
		ReadTimeout:       lim.HeaderTimeout + lim.MessageTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         l.ConnState,
	}
}

// allowedHosts returns the Host names the HTTP ports answer to:
// Config.AllowedHosts and the host names of the HTTP, admin and metrics
// addresses, besides IP addresses and localhost.
func (d *Daemon) allowedHosts() *hostcheck.Hosts {
	names := slices.Clone(d.cfg.AllowedHosts)
	for _, addr := range []string{d.cfg.HTTPAddr, d.cfg.AdminAddr, d.cfg.MetricsAddr} {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
			names = append(names, host)
		}
	}
	return hostcheck.New(names...)
}

// limitCollectors returns the metrics of the limits: connections open and
// busy, evicted and refused, per port; gRPC calls waiting for their
// message, and those ended.
func (d *Daemon) limitCollectors() []prometheus.Collector {
	var cs []prometheus.Collector
	for _, p := range []struct {
		port string
		l    *connlimit.Listener
	}{{"grpc", d.grpcLis}, {"http", d.httpLis}, {"admin", d.adminLis}, {"metrics", d.metricsLis}} {
		if p.l == nil {
			continue
		}
		labels := prometheus.Labels{"port": p.port}
		l := p.l
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_connections", ConstLabels: labels,
				Help: "Connections open on the port (--max-connections)."}, func() float64 { n, _ := l.Open(); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_connections_busy", ConstLabels: labels,
				Help: "Connections of the port with a call or request in progress."}, func() float64 { _, n := l.Open(); return float64(n) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimitd_connections_evicted_total", ConstLabels: labels,
				Help: "Idle connections closed to make room for a new one, --max-connections being open."}, func() float64 { return float64(l.Evicted()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimitd_connections_refused_total", ConstLabels: labels,
				Help: "New connections closed on arrival, --max-connections being open and busy."}, func() float64 { return float64(l.Refused()) }),
		)
	}
	for _, w := range []struct {
		port string
		l    *recvlimit.Limiter
	}{{"grpc", d.waiting}, {"http", d.bodies}} {
		labels := prometheus.Labels{"port": w.port}
		ended := func(reason string, n func() uint64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimitd_waiting_ended_total", ConstLabels: prometheus.Labels{"port": w.port, "reason": reason},
				Help: "Requests ended while their message or body was on its way: timeout (--message-timeout), evicted (--grpc-max-waiting, --http-max-waiting)."},
				func() float64 { return float64(n()) })
		}
		l := w.l
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_waiting_requests", ConstLabels: labels,
				Help: "gRPC calls waiting for their request message; HTTP decision calls' bodies on their way."}, func() float64 { return float64(l.Waiting()) }),
			ended("timeout", func() uint64 { t, _ := l.Ended(); return t }),
			ended("evicted", func() uint64 { _, e := l.Ended(); return e }),
		)
	}
	refused := func(bound string, n func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimitd_long_streams_refused_total", ConstLabels: prometheus.Labels{"port": "grpc", "bound": bound},
			Help: "Long-lived gRPC streams (health Watch, quota streams, reflection) refused by a bound: connection (--grpc-max-long-streams-per-conn), caller (--grpc-max-long-streams-per-caller), all (--grpc-max-long-streams, no caller holding more)."},
			func() float64 { return float64(n()) })
	}
	ls := d.longStreams
	cs = append(cs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_long_streams", ConstLabels: prometheus.Labels{"port": "grpc"},
			Help: "Long-lived gRPC streams held (health Watch, quota streams, reflection)."}, func() float64 { return float64(ls.Held()) }),
		refused("connection", func() uint64 { n, _, _ := ls.Refused(); return n }),
		refused("caller", func() uint64 { _, n, _ := ls.Refused(); return n }),
		refused("all", func() uint64 { _, _, n := ls.Refused(); return n }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ratelimitd_long_streams_evicted_total", ConstLabels: prometheus.Labels{"port": "grpc"},
			Help: "Long-lived gRPC streams ended to make room for a caller holding fewer, --grpc-max-long-streams being held."}, func() float64 { return float64(ls.Evicted()) }),
	)
	cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_connections_paced", ConstLabels: prometheus.Labels{"port": "grpc"},
		Help: fmt.Sprintf("gRPC connections read paced (--grpc-paced-read-rate), a call of theirs having been ended waiting for its message in the last %v.", PacedQuiet)},
		func() float64 { return float64(d.pacer.Paced()) }))
	return cs
}
