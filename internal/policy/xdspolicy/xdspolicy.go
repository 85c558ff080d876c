// Package xdspolicy receives ratelimitd's policy from an xDS control plane,
// as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW (and Envoy
// Gateway deploys it): a state-of-the-world subscription over the
// Aggregated Discovery Service to resources of type
// ratelimit.config.ratelimit.v3.RateLimitConfig, one per domain.
//
// A Client keeps one ADS stream to the server. Each response holds every
// resource (state of the world); the Client decodes them and hands them to
// its Apply function, which builds and puts the policy in force or refuses
// it. An applied response is ACKed (the request carries its version and
// nonce); a refused one is NACKed (the last applied version, the refused
// response's nonce, and the reason in error_detail), and the policy in
// force stays. A control plane may send a refused version again at once
// (go-control-plane's snapshot cache answers every request whose version
// differs from its own): the Client then refuses it without applying it,
// logging or counting it again, and waits before its NACK, as long as
// before a reconnection, so that the two do not loop at network speed.
// When the stream breaks, or cannot be opened, the Client
// connects again after a backoff: Config.InitialBackoff, doubled after each
// failure up to Config.MaxBackoff, each wait drawn at random from its upper
// half; a stream that delivered a response starts the backoff over. A new
// stream asks again with the last applied version.
//
// A response is bounded before its resources are decoded (Config.Bounds):
// their number (counted by the stream's codec, before gRPC decodes the
// response), their encoded bytes together, their descriptors together and
// how deep these nest, read from the wire format (config.CountDescriptors),
// so that a response beyond them costs no more memory than its bytes; it
// is NACKed with the bound named. Decoded resources are checked field by
// field (config.FromRateLimitConfigs): an unknown field is NACKed too.
//
// A resource may come wrapped in envoy.service.discovery.v3.Resource (as
// xDS allows); the wrapper's metadata.filter_metadata["ratelimitd"], when
// present, carries ratelimitd's extensions of the resource's limits
// (config.RateLimitConfig.Extensions).
package xdspolicy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// TypeURL is the type of the resources the Client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// resourceTypeURL is the type of xDS's resource wrapper.
const resourceTypeURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// ExtensionsKey is the filter_metadata key of a wrapped resource under which
// ratelimitd's extensions are.
const ExtensionsKey = "ratelimitd"

// Defaults of Config.
const (
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
)

// Config says where the policy comes from.
type Config struct {
	// Server is the control plane's gRPC target, host:port.
	Server string
	// NodeID is the node id the control plane keeps this daemon's snapshot
	// under.
	NodeID string
	// TLS, when not nil, connects over TLS with it (ClientTLS builds it
	// from files); nil connects in plaintext.
	TLS *tls.Config
	// Headers are sent with the stream as gRPC metadata.
	Headers map[string]string
	// InitialBackoff and MaxBackoff bound the wait before connecting again
	// (0: the defaults).
	InitialBackoff, MaxBackoff time.Duration
	// MaxMessageBytes bounds a response's size (0: gRPC's default, 4 MiB).
	MaxMessageBytes int
	// Bounds bound a response's resources before they are decoded (zero
	// value: config.DefaultPolicyBounds): their number, and their
	// descriptors together, within MaxDescriptors; their encoded bytes
	// together within MaxBytes; descriptors nested at most
	// config.MaxDepth deep. A response beyond them is
	// refused (NACKed) without being decoded.
	Bounds config.PolicyBounds
	// Logger receives connection and update logs (nil: slog.Default()).
	Logger *slog.Logger
}

// Apply builds the policy of one response's resources (the whole state) and
// puts it in force, or returns why it refused it. version is the response's
// version_info.
type Apply func(version string, configs []config.RateLimitConfig) error

// Status is what the Client has done so far.
type Status struct {
	Server string `json:"server"`
	NodeID string `json:"node_id"`
	// Connected is true while a stream is open.
	Connected bool `json:"connected"`
	// Version is the version of the resources in force ("" before the
	// first), and AppliedAt when they were applied.
	Version   string    `json:"version"`
	AppliedAt time.Time `json:"applied_at,omitzero"`
	// Applied and Refused count the responses applied and NACKed.
	Applied uint64 `json:"applied"`
	Refused uint64 `json:"refused"`
	// LastNACK is the reason the last refused response was refused, with
	// its version and time; empty when none has been since the last
	// applied one.
	LastNACK        string    `json:"last_nack,omitempty"`
	LastNACKVersion string    `json:"last_nack_version,omitempty"`
	LastNACKAt      time.Time `json:"last_nack_at,omitzero"`
	// LastError is why the last stream ended or could not be opened.
	LastError string `json:"last_error,omitempty"`
}

// Client subscribes to the policy. Its methods are safe for concurrent use.
type Client struct {
	cfg   Config
	apply Apply
	log   *slog.Logger

	mu     sync.Mutex
	status Status
}

// New returns a Client that puts what it receives in force through apply.
// It does not connect until Run.
func New(cfg Config, apply Apply) (*Client, error) {
	switch {
	case cfg.Server == "":
		return nil, errors.New("xds: no server address")
	case cfg.NodeID == "":
		return nil, errors.New("xds: no node id")
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.InitialBackoff)
	if cfg.Bounds == (config.PolicyBounds{}) {
		cfg.Bounds = config.DefaultPolicyBounds
	}
	if err := cfg.Bounds.Check(); err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{cfg: cfg, apply: apply, log: cfg.Logger.With("xds_server", cfg.Server, "node_id", cfg.NodeID)}
	c.status.Server, c.status.NodeID = cfg.Server, cfg.NodeID
	return c, nil
}

// Status returns what the Client has done so far.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Run keeps the subscription until ctx ends.
func (c *Client) Run(ctx context.Context) {
	backoff := c.cfg.InitialBackoff
	for {
		got, err := c.session(ctx)
		c.setStatus(func(s *Status) {
			s.Connected = false
			if err != nil {
				s.LastError = err.Error()
			}
		})
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = c.cfg.InitialBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		c.log.Warn("xds: stream to the policy server ended; connecting again", "error", err, "in", wait)
		if !sleep(ctx, wait) {
			return
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

// session opens one stream and serves it until it breaks. got says whether
// a response arrived on it.
func (c *Client) session(ctx context.Context) (got bool, err error) {
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.cfg.MaxMessageBytes > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.cfg.MaxMessageBytes)))
	}
	conn, err := grpc.NewClient(c.cfg.Server, opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k, v := range c.cfg.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, grpc.WaitForReady(false),
		grpc.ForceCodecV2(newBoundedCodec(c.cfg.Bounds.MaxDescriptors)))
	if err != nil {
		return false, err
	}
	if err := stream.Send(c.request(c.Status().Version, "", nil)); err != nil {
		return false, err
	}
	c.setStatus(func(s *Status) { s.Connected = true })
	c.log.Info("xds: subscribed to the policy", "type", TypeURL)
	nackDelay := c.cfg.InitialBackoff
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, err
		}
		got = true
		req := c.repeatedNACK(resp)
		if req != nil {
			if !sleep(ctx, nackDelay) {
				return got, ctx.Err()
			}
			nackDelay = min(2*nackDelay, c.cfg.MaxBackoff)
		} else {
			req = c.handle(resp)
			nackDelay = c.cfg.InitialBackoff
		}
		if err := stream.Send(req); err != nil {
			return got, err
		}
	}
}

// repeatedNACK returns the NACK of resp when its version is the one last
// refused, nil otherwise.
func (c *Client) repeatedNACK(resp *discoveryv3.DiscoveryResponse) *discoveryv3.DiscoveryRequest {
	s := c.Status()
	if s.LastNACK == "" || resp.GetVersionInfo() != s.LastNACKVersion {
		return nil
	}
	return c.request(s.Version, resp.GetNonce(), &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: s.LastNACK})
}

// sleep waits d, or until ctx ends (and then returns false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// handle applies one response and returns its ACK or NACK.
func (c *Client) handle(resp *discoveryv3.DiscoveryResponse) *discoveryv3.DiscoveryRequest {
	version := resp.GetVersionInfo()
	err := c.decodeAndApply(resp)
	now := time.Now()
	if err != nil {
		var acked string
		c.setStatus(func(s *Status) {
			s.Refused++
			s.LastNACK, s.LastNACKVersion, s.LastNACKAt = err.Error(), version, now
			acked = s.Version
		})
		c.log.Error("xds: policy update refused (NACK); the policy in force goes on serving", "version", version, "in_force", acked, "error", err)
		return c.request(acked, resp.GetNonce(), &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()})
	}
	c.setStatus(func(s *Status) {
		s.Applied++
		s.Version, s.AppliedAt = version, now
		s.LastNACK, s.LastNACKVersion, s.LastNACKAt = "", "", time.Time{}
	})
	c.log.Info("xds: policy update applied (ACK)", "version", version, "resources", len(resp.GetResources()))
	return c.request(version, resp.GetNonce(), nil)
}

func (c *Client) decodeAndApply(resp *discoveryv3.DiscoveryResponse) error {
	if t := resp.GetTypeUrl(); t != TypeURL {
		return fmt.Errorf("response of type %q, want %q", t, TypeURL)
	}
	if err := refusedBeforeDecoding(resp); err != nil {
		return err
	}
	bounds := c.cfg.Bounds
	if n := len(resp.GetResources()); n > bounds.MaxDescriptors {
		return tooManyResources(n, bounds.MaxDescriptors)
	}
	var size int64
	for _, r := range resp.GetResources() {
		size += int64(len(r.GetValue()))
	}
	if size > bounds.MaxBytes {
		return fmt.Errorf("resources: %d bytes together, more than the limit of %d (--max-policy-bytes); not decoded", size, bounds.MaxBytes)
	}
	configs := make([]config.RateLimitConfig, 0, len(resp.GetResources()))
	budget := bounds.MaxDescriptors
	for i, r := range resp.GetResources() {
		rc, n, err := decode(r, budget)
		if err == nil && n > budget {
			err = fmt.Errorf("more than %d descriptors (--max-policy-descriptors, the resources together); not decoded", bounds.MaxDescriptors)
		}
		if err != nil {
			return fmt.Errorf("resources[%d]: %w", i, err)
		}
		budget -= n
		configs = append(configs, rc)
	}
	return c.apply(resp.GetVersionInfo(), configs)
}

// decode returns one resource, unwrapping it from a Resource wrapper, and
// how many descriptors it holds. When they are more than budget, or nest
// deeper than config.MaxDepth, it returns before decoding them (see
// config.CountDescriptors).
func decode(a *anypb.Any, budget int) (rc config.RateLimitConfig, descriptors int, err error) {
	if a.GetTypeUrl() == resourceTypeURL {
		var w discoveryv3.Resource
		if err := a.UnmarshalTo(&w); err != nil {
			return rc, 0, err
		}
		rc.Extensions = w.GetMetadata().GetFilterMetadata()[ExtensionsKey]
		a = w.GetResource()
	}
	if a.GetTypeUrl() != TypeURL {
		return rc, 0, fmt.Errorf("type %q, want %q", a.GetTypeUrl(), TypeURL)
	}
	if descriptors, err = config.CountDescriptors(a.GetValue(), budget); err != nil || descriptors > budget {
		return rc, descriptors, err
	}
	rc.Config = &rlsconfv3.RateLimitConfig{}
	if err := a.UnmarshalTo(rc.Config); err != nil {
		return rc, 0, err
	}
	return rc, descriptors, nil
}

// request returns a discovery request: the first of a stream (nonce ""),
// an ACK, or a NACK (with detail).
func (c *Client) request(version, nonce string, detail *rpcstatus.Status) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: c.cfg.NodeID, UserAgentName: "ratelimitd"},
		TypeUrl:       TypeURL,
		VersionInfo:   version,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
}

func (c *Client) setStatus(f func(*Status)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.status)
}
