package xdspolicy

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/ratelimitd/ratelimitd/internal/transport/tlsconfig"
)

// ClientTLS returns the TLS configuration of the connection to the control
// plane: the server is verified against the CA certificates in caFile (the
// system's roots when empty) and, when serverName is set, by that name
// instead of the host of Config.Server; with certFile and keyFile, the
// client presents that certificate (mutual TLS). The certificate files are
// read again at every handshake, so that a rotated certificate is used by
// the next connection; they are read once here too, so that a bad file
// fails at start.
func ClientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		var err error
		if c.RootCAs, err = tlsconfig.CertPool(caFile); err != nil {
			return nil, fmt.Errorf("xds server CA: %w", err)
		}
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "" || keyFile == "":
		return nil, errors.New("xds client certificate: give both the certificate and its key")
	default:
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return nil, fmt.Errorf("xds client certificate: %w", err)
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("xds client certificate: %w", err)
			}
			return &pair, nil
		}
	}
	return c, nil
}
