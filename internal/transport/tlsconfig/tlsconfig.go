// Package tlsconfig serves TLS, and mutual TLS, from certificate files that
// may be replaced while the daemon runs.
//
// A Server loads a certificate and its key and, for mutual TLS, the CA
// certificates that client certificates must chain to. Reload loads them
// again; until a reload succeeds the previous ones stay in use, so a
// half-written or mismatched set never reaches a handshake. Each handshake
// uses the set in force when it starts; established connections keep
// theirs.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Files names the PEM files a Server loads.
type Files struct {
	// Cert is the server's certificate chain, leaf first; Key its private
	// key. Both are required.
	Cert, Key string
	// ClientCA, when set, turns on mutual TLS: a client must present a
	// certificate that chains to one of the CA certificates in this file,
	// or the handshake fails.
	ClientCA string
}

// Paths returns the files that are set, for watching.
func (f Files) Paths() []string {
	paths := []string{f.Cert, f.Key}
	if f.ClientCA != "" {
		paths = append(paths, f.ClientCA)
	}
	return paths
}

// Server is the TLS configuration of a server. It is safe for concurrent
// use.
type Server struct {
	files Files
	cur   atomic.Pointer[loaded]
}

// loaded is one consistent set of the files' contents.
type loaded struct {
	config   *tls.Config
	notAfter time.Time
}

// New loads files and returns a Server for them, or an error naming the
// file that could not be used.
func New(files Files) (*Server, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("tls: a certificate and its key are both required")
	}
	s := &Server{files: files}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload loads the files again and, when they make a valid set, uses them
// for handshakes from now on. On error the previous set stays in use.
func (s *Server) Reload() error {
	l, err := load(s.files)
	if err != nil {
		return err
	}
	s.cur.Store(l)
	return nil
}

func load(f Files) (*loaded, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// gRPC requires HTTP/2 to be negotiated; a config returned by
		// GetConfigForClient must say so itself.
		NextProtos: []string{"h2"},
	}
	if f.ClientCA != "" {
		pool, err := CertPool(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA: %w", err)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return &loaded{config: c, notAfter: cert.Leaf.NotAfter}, nil
}

// CertPool returns a pool of the CA certificates in the PEM file at path;
// a file without one is an error.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Config returns a configuration for a TLS listener (or gRPC's
// credentials.NewTLS) whose handshakes use the set in force when each
// starts.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().config, nil
		},
	}
}

// NotAfter returns when the certificate in use expires.
func (s *Server) NotAfter() time.Time { return s.cur.Load().notAfter }

// ExpirySoon is how close to its expiry a certificate is said to expire
// soon (ExpiryWarning).
const ExpirySoon = 7 * 24 * time.Hour

// ExpiryWarning describes, at now, a certificate that expires at notAfter,
// when it has expired or expires within ExpirySoon: "expired 2h0m0s ago",
// "expires in 71h59m0s" (durations rounded to the minute). It returns ""
// for a certificate valid for longer. A certificate is expired from
// notAfter on (at notAfter itself, "expired 0s ago").
func ExpiryWarning(notAfter, now time.Time) string {
	left := notAfter.Sub(now)
	switch {
	case left <= 0:
		return fmt.Sprintf("expired %v ago", (-left).Round(time.Minute))
	case left <= ExpirySoon:
		return fmt.Sprintf("expires in %v", left.Round(time.Minute))
	}
	return ""
}

// MutualTLS reports whether client certificates are required.
func (s *Server) MutualTLS() bool { return s.files.ClientCA != "" }
