package daemon

import (
	"time"

	"github.com/ratelimitd/ratelimitd/internal/operator/admin"
	"github.com/ratelimitd/ratelimitd/internal/operator/console"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
)

// Reload reads the policy at Config.ConfigPath again. A valid policy is
// put in force for every request that starts after Reload returns
// (requests already deciding finish under the old one; none is dropped),
// and buckets whose limits it leaves unchanged keep their state. An invalid
// one is rejected: Reload logs every problem and returns them, the failure
// is counted (ratelimitd_policy_reloads_total{result="failure"}), and the
// previous policy goes on serving.
//
// The daemon calls Reload itself when the files at Config.ConfigPath
// change; cmd/ratelimitd calls it on SIGHUP. With the embedded default
// policy there is nothing to read: Reload logs so and returns nil.
// Reloads never run concurrently.
func (d *Daemon) Reload() error {
	path := d.cfg.ConfigPath
	if d.xds != nil {
		d.log.Info("policy reload asked for; the policy comes from xDS, which pushes its updates")
		return nil
	}
	if path == "" {
		d.log.Info("policy reload asked for; the embedded default policy has nothing to reload")
		return nil
	}
	d.reloading.Lock()
	defer d.reloading.Unlock()
	p, err := config.LoadWithin(path, d.cfg.PolicyBounds)
	now := time.Now()
	if err != nil {
		d.metrics.PolicyReloaded(nil, now, err)
		d.reloadFail.Store(&console.ReloadStatus{LastError: err.Error(), LastErrorAt: now})
		d.log.Error("policy reload failed; the previous policy goes on serving", "config", path, "error", err)
		return err
	}
	d.warnPolicy(p)
	d.engine.SetPolicy(p)
	d.loaded.Store(&admin.Loaded{Policy: p, Path: path, At: now})
	d.metrics.PolicyReloaded(p, now, nil)
	d.reloadFail.Store(nil)
	d.log.Info("policy reloaded", "config", path, "domains", len(p.Domains()))
	return nil
}

// loadedPolicy returns the policy in force, for /policies.
func (d *Daemon) loadedPolicy() admin.Loaded { return *d.loaded.Load() }

// reloadStatus returns the last failed reload since the last successful
// load, for the console.
func (d *Daemon) reloadStatus() console.ReloadStatus {
	if f := d.reloadFail.Load(); f != nil {
		return *f
	}
	return console.ReloadStatus{}
}

// reloadTLS loads the gRPC server's certificate files again, after they
// changed; on failure the previous ones stay in use.
func (d *Daemon) reloadTLS() {
	err := d.tls.Reload()
	d.metrics.CertificateLoaded(true, d.tls.NotAfter(), err)
	if err != nil {
		d.log.Error("TLS certificate reload failed; the previous certificate goes on serving", "error", err)
		return
	}
	d.log.Info("TLS certificate reloaded", "cert", d.cfg.TLS.Cert, "not_after", d.tls.NotAfter())
	d.warnCertificate()
}

// warnPolicy logs a warning for each domain of p without a limit that can
// deny (no rules, or only unlimited ones), which admits every request.
func (d *Daemon) warnPolicy(p *config.Policy) {
	for _, dom := range p.Domains() {
		if !dom.HasLimits() {
			d.log.Warn("policy domain has no rate limits: it admits every request", "domain", dom.Name, "source", dom.Source)
		}
	}
}

// warnCertificate logs a warning when the gRPC server's certificate in use
// has expired or expires within tlsconfig.ExpirySoon (7 days).
func (d *Daemon) warnCertificate() {
	notAfter := d.tls.NotAfter()
	if w := tlsconfig.ExpiryWarning(notAfter, time.Now()); w != "" {
		d.log.Warn("TLS certificate "+w, "cert", d.cfg.TLS.Cert, "not_after", notAfter)
	}
}
