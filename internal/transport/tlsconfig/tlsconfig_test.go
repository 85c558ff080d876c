package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig/tlstest"
)

// serve accepts TLS connections on loopback with s's configuration and
// writes "ok" on each that completes a handshake.
func serve(t *testing.T, s *tlsconfig.Server) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", s.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// dial connects, and returns the server's certificate and an error when
// the server did not accept the connection.
func dial(addr string, roots *x509.CertPool, client *tls.Certificate) (*x509.Certificate, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// With TLS 1.3 the server checks the client's certificate after the
	// client's handshake is done: its verdict is the first read.
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func keyPair(t *testing.T, p tlstest.Pair) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	cert, key := ca.Server(t, "server", time.Now().Add(time.Hour)).Write(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)

	tests := []struct {
		name     string
		clientCA string
		client   *tls.Certificate
		wantOK   bool
	}{
		{"TLS, no client certificate", "", nil, true},
		{"mTLS, client certificate from the CA", caFile, keyPair(t, ca.Client(t, "alice")), true},
		{"mTLS, no client certificate", caFile, nil, false},
		{"mTLS, client certificate from another CA", caFile, keyPair(t, other.Client(t, "mallory")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tlsconfig.New(tlsconfig.Files{Cert: cert, Key: key, ClientCA: tt.clientCA})
			if err != nil {
				t.Fatal(err)
			}
			if s.MutualTLS() != (tt.clientCA != "") {
				t.Errorf("MutualTLS() = %v", s.MutualTLS())
			}
			_, err = dial(serve(t, s), ca.Pool(), tt.client)
			if (err == nil) != tt.wantOK {
				t.Fatalf("dial: %v, want accepted=%v", err, tt.wantOK)
			}
		})
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "first", time.Now().Add(time.Hour).Truncate(time.Second))
	cert, key := first.Write(t, dir, "server")
	s, err := tlsconfig.New(tlsconfig.Files{Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s)
	if !s.NotAfter().Equal(first.Leaf.NotAfter) {
		t.Fatalf("NotAfter %v, want %v", s.NotAfter(), first.Leaf.NotAfter)
	}

	second := ca.Server(t, "second", time.Now().Add(2*time.Hour).Truncate(time.Second))
	second.Write(t, dir, "server")
	// Not reloaded yet: handshakes still use the first.
	if got, err := dial(addr, ca.Pool(), nil); err != nil || got.Subject.CommonName != "first" {
		t.Fatalf("before Reload: %v %v", got, err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := dial(addr, ca.Pool(), nil); err != nil || got.Subject.CommonName != "second" {
		t.Fatalf("after Reload: %v %v", got, err)
	}
	if !s.NotAfter().Equal(second.Leaf.NotAfter) {
		t.Fatalf("NotAfter %v, want %v", s.NotAfter(), second.Leaf.NotAfter)
	}

	// A key that does not match: the reload fails and the second stays.
	tlstest.WriteFile(t, key, ca.Server(t, "third", time.Now().Add(time.Hour)).Key)
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), cert) {
		t.Fatalf("Reload with a mismatched key: %v, want an error naming %s", err, cert)
	}
	if got, err := dial(addr, ca.Pool(), nil); err != nil || got.Subject.CommonName != "second" {
		t.Fatalf("after a failed Reload: %v %v", got, err)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t, "server", time.Now().Add(time.Hour)).Write(t, dir, "server")
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	tests := []struct {
		name    string
		files   tlsconfig.Files
		wantErr string
	}{
		{"no key", tlsconfig.Files{Cert: cert}, "both required"},
		{"no certificate", tlsconfig.Files{Key: key}, "both required"},
		{"missing file", tlsconfig.Files{Cert: cert, Key: filepath.Join(dir, "none.key")}, "none.key"},
		{"key is not a key", tlsconfig.Files{Cert: cert, Key: notPEM}, "not.pem"},
		{"client CA without certificates", tlsconfig.Files{Cert: cert, Key: key, ClientCA: notPEM}, "no PEM certificate"},
		{"missing client CA", tlsconfig.Files{Cert: cert, Key: key, ClientCA: filepath.Join(dir, "none.pem")}, "none.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tlsconfig.New(tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestExpiryWarning(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		notAfter time.Time
		want     string
	}{
		{now.Add(-2 * time.Hour), "expired 2h0m0s ago"},
		{now, "expired 0s ago"},
		{now.Add(time.Minute), "expires in 1m0s"},
		{now.Add(tlsconfig.ExpirySoon), "expires in 168h0m0s"},
		{now.Add(tlsconfig.ExpirySoon + time.Second), ""},
		{now.Add(365 * 24 * time.Hour), ""},
	}
	for _, tt := range tests {
		if got := tlsconfig.ExpiryWarning(tt.notAfter, now); got != tt.want {
			t.Errorf("ExpiryWarning(now%+v) = %q, want %q", tt.notAfter.Sub(now), got, tt.want)
		}
	}
}
