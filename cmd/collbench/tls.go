package main

import (
	"crypto/tls"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit/transport/tcp"
)

// tlsFiles are the PEM files of --tls-cert, --tls-key and --tls-ca.
type tlsFiles struct{ cert, key, ca string }

func (f *tlsFiles) flags(fs *pflag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "this rank's TLS certificate (PEM); with --tls-key and --tls-ca turns on mutual TLS between ranks")
	fs.StringVar(&f.key, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.StringVar(&f.ca, "tls-ca", "", "the CA (PEM) that signed every rank's certificate")
}

func (f tlsFiles) complete() bool {
	set := 0
	for _, s := range []string{f.cert, f.key, f.ca} {
		if s != "" {
			set++
		}
	}
	return set == 0 || set == 3
}

// load returns the TLS config, or nil when TLS is off.
func (f tlsFiles) load() (*tls.Config, error) {
	if f.cert == "" {
		return nil, nil
	}
	return tcp.LoadTLS(f.cert, f.key, f.ca)
}
