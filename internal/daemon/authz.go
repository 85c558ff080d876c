package daemon

import (
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/internal/api/authz"
)

// loadAuthz reads the authorization policy, when Config.AuthzPolicy names
// one, and adds its metrics. It warns when the policy names identities the
// gRPC port cannot see or should not carry: certificate rules without
// mutual TLS, bearer tokens over plaintext.
func (d *Daemon) loadAuthz() (err error) {
	if d.cfg.AuthzPolicy == "" {
		return nil
	}
	if d.authz, err = authz.New(d.cfg.AuthzPolicy, authz.WithLogger(d.log)); err != nil {
		return err
	}
	d.metrics.Registry().MustRegister(d.authz.Collectors()...)
	p := d.authz.Policy()
	byCert, byToken := p.Identifies()
	d.log.Info("authorization policy loaded", "authz_policy", d.cfg.AuthzPolicy, "clients", p.Clients())
	if byCert && (d.tls == nil || !d.tls.MutualTLS()) {
		d.log.Warn("the authorization policy matches client certificates, but the gRPC port does not ask for them (--tls-client-ca): no caller is identified by one")
	}
	if byToken && d.tls == nil {
		d.log.Warn("the authorization policy accepts bearer tokens over a plaintext gRPC port: anyone on the path can read them (serve TLS)")
	}
	return nil
}

// ownInterceptors returns the daemon's unary interceptors, outermost
// first: metrics (so that refused calls are counted with their codes),
// the check that the request decoded (decoded: the transport's, gRPC's
// grpcdecode or httpapi.CheckDecoded), then authorization when it is on,
// then, with an xDS policy not yet in, the refusal of decision calls.
func (d *Daemon) ownInterceptors(decoded grpc.UnaryServerInterceptor) []grpc.UnaryServerInterceptor {
	own := []grpc.UnaryServerInterceptor{d.metrics.UnaryServerInterceptor(), decoded}
	if d.authz != nil {
		own = append(own, d.authz.UnaryServerInterceptor())
	}
	if d.xds != nil && !d.cfg.StartWithoutPolicy {
		own = append(own, d.refuseWithoutPolicy)
	}
	return own
}

// ReloadAuthz reads the authorization policy and its token files again
// (authz.Authorizer.Reload): a valid policy decides every call that starts
// after it returns; an invalid one is logged, counted
// (ratelimitd_authz_reloads_total{result="failure"}) and returned, and the
// previous one goes on serving. The daemon reloads by itself when the files
// change; cmd/ratelimitd calls ReloadAuthz on SIGHUP. Without
// Config.AuthzPolicy it does nothing.
func (d *Daemon) ReloadAuthz() error {
	if d.authz == nil {
		return nil
	}
	return d.authz.Reload()
}
