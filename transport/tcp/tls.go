package tcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/collkit/collkit/transport"
)

// LoadTLS builds a Config.TLS for mutual TLS from PEM files: this rank's
// certificate and key, and the CA that signed every rank's certificate.
// Each side of a connection presents its certificate and accepts the
// other's only if the CA signed it; host names are not checked, so one CA
// per job (or per trusted cluster) identifies the job's ranks wherever they
// run. TLS 1.3 only.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tcp: loading the TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tcp: reading the TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tcp: %s holds no PEM certificate to use as the CA", caFile)
	}
	return JobTLS(cert, pool), nil
}

// JobTLS is LoadTLS for a certificate and CA pool already in memory.
func JobTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the peer presented no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, b := range raw {
			c, err := x509.ParseCertificate(b)
			if err != nil {
				return err
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	return &tls.Config{
		Certificates:          []tls.Certificate{cert},
		MinVersion:            tls.VersionTLS13,
		ClientAuth:            tls.RequireAnyClientCert,
		InsecureSkipVerify:    true, // the chain is checked by verify; host names are not
		VerifyPeerCertificate: verify,
	}
}

// secureOut runs the TLS handshake as the client on a dialed connection
// when Config.TLS is set.
func (t *Transport) secureOut(ctx context.Context, c net.Conn, r int, addr string) (net.Conn, error) {
	if t.cfg.TLS == nil {
		return c, nil
	}
	tc := tls.Client(c, t.cfg.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, &transport.PeerError{Rank: r, Addr: addr, Op: "connect", Err: fmt.Errorf(
			"%w: TLS handshake failed: %w; every rank needs TLS on, with a certificate signed by the same CA (--tls-ca)",
			transport.ErrRejected, err)}
	}
	return tc, nil
}

// secureIn runs the TLS handshake as the server on an accepted connection.
func (t *Transport) secureIn(ctx context.Context, c net.Conn) (net.Conn, error) {
	tc := tls.Server(c, t.cfg.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}
