package tcp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// testCA makes a CA and returns a TLS config for a rank certificate it
// signed.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "collkit test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert, key, pool}
}

func (ca *testCA) rankTLS(t testing.TB, name string) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return JobTLS(tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, ca.pool)
}

func TestTLSMesh(t *testing.T) {
	ca := newTestCA(t)
	ts := newWorld(t, 3, nil, func(c *Config) {
		c.TLS, c.Secret, c.Streams = ca.rankTLS(t, fmt.Sprint("rank", c.Rank)), testSecret, 2
	})
	ctx := context.Background()
	for _, size := range []int{5, 100 << 10, 3 << 20} {
		out := make([]byte, size)
		rand.Read(out)
		errc := make(chan error, 1)
		go func() { errc <- ts[2].Send(ctx, 0, hdr(1), out) }()
		in := make([]byte, size)
		if err := ts[0].Recv(ctx, 2, hdr(1), in); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if string(in) != string(out) {
			t.Fatalf("%d bytes over TLS arrived changed", size)
		}
	}
}

// A rank whose certificate another CA signed, or that has TLS off, cannot
// join.
func TestTLSRejectsOtherCA(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	for name, cfg1 := range map[string]*tls.Config{"other CA": other.rankTLS(t, "intruder"), "no TLS": nil} {
		t.Run(name, func(t *testing.T) {
			store := bootstrap.NewMemStore()
			t0, _ := New(Config{Rank: 0, Size: 2, TLS: ca.rankTLS(t, "rank0"), ConnectTimeout: time.Second})
			t1, _ := New(Config{Rank: 1, Size: 2, TLS: cfg1, ConnectTimeout: time.Second})
			defer t0.Close()
			defer t1.Close()
			t0.log, t1.log = quiet, quiet
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- t0.Connect(ctx, store) }()
			err1 := t1.Connect(ctx, store)
			err0 := <-errc
			if err0 == nil || err1 == nil {
				t.Fatalf("connected: rank 0 %v, rank 1 %v", err0, err1)
			}
			if name == "other CA" && !errors.Is(err1, transport.ErrRejected) {
				t.Errorf("rank 1: %v, want a TLS rejection", err1)
			}
		})
	}
}

// BenchmarkTLSCost compares a one-way stream of messages over plain TCP and
// over TLS between two ranks in this process.
func BenchmarkTLSCost(b *testing.B) {
	ca := newTestCA(b)
	for _, mode := range []string{"plain", "tls"} {
		ts := newWorld(b, 2, nil, func(c *Config) {
			if mode == "tls" {
				c.TLS = ca.rankTLS(b, fmt.Sprint("rank", c.Rank))
			}
		})
		for _, size := range []int{8, 64 << 10, 1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("%s/size=%s", mode, byteSize(size)), func(b *testing.B) {
				ctx := context.Background()
				out, in := make([]byte, size), make([]byte, size)
				done := make(chan error, 1)
				go func() {
					for range b.N {
						if err := ts[1].Recv(ctx, 0, hdr(0), in); err != nil {
							done <- err
							return
						}
					}
					done <- ts[1].Send(ctx, 0, hdr(1), in[:1])
				}()
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					if err := ts[0].Send(ctx, 1, hdr(0), out); err != nil {
						b.Fatal(err)
					}
				}
				if err := ts[0].Recv(ctx, 1, hdr(1), out[:1]); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
