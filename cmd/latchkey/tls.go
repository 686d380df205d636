package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"
)

// tlsFlags name, as curl does, what an https server needs of latchkey: the
// CA certificates to trust instead of the system's (-cacert), and a client
// certificate and its key for a server that requires one (-cert, -key;
// mTLS). Each falls back to its LATCHKEY_ variable.
type tlsFlags struct {
	cacert, cert, key string
}

// register adds -cacert, -cert and -key to fs, with f's values as defaults
// (those given before the subcommand).
func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cacert, "cacert", f.cacert, "PEM CA certificates to verify an https server with, instead of the system's ($LATCHKEY_CACERT)")
	fs.StringVar(&f.cert, "cert", f.cert, "PEM client certificate to present to an https server that requires one ($LATCHKEY_CERT)")
	fs.StringVar(&f.key, "key", f.key, "PEM private key of -cert; default: -cert's file ($LATCHKEY_KEY)")
}

// httpClient is the HTTP client f asks for, with the environment filling
// in what the flags leave out; nil when neither names anything (the
// client's own default). Returns an error naming the flag when a file
// cannot be read or holds no certificate or key.
func (f tlsFlags) httpClient(getenv func(string) string) (*http.Client, error) {
	or := func(v, env string) string {
		if v == "" {
			v = getenv(env)
		}
		return v
	}
	cacert, cert, key := or(f.cacert, "LATCHKEY_CACERT"), or(f.cert, "LATCHKEY_CERT"), or(f.key, "LATCHKEY_KEY")
	if cacert == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("-cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert %s: no PEM certificate in it", cacert)
		}
		cfg.RootCAs = pool
	}
	if key != "" && cert == "" {
		return nil, fmt.Errorf("-key %s needs -cert, the certificate it is the key of", key)
	}
	if cert != "" {
		if key == "" {
			key = cert // one file may hold both, as curl allows
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("-cert %s, -key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}
