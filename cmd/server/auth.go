package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/prometheus/client_golang/prometheus"
)

// AuthFlags are the API-key and TLS settings.
type AuthFlags struct {
	KeysFile       string
	ReloadInterval time.Duration
	FailLimit      int
	FailWindow     time.Duration
	TLSCert        string
	TLSKey         string
	TLSClientCA    string
}

func (f *AuthFlags) register(e *envFlags) {
	e.str(&f.KeysFile, "api-keys", "LATCHKEY_API_KEYS", "", "YAML file of tenants and API keys (SHA-256 hashes); every /v1 request then needs Authorization: Bearer <key>; empty: no keys (the API is open)")
	e.dur(&f.ReloadInterval, "api-keys-reload-interval", "LATCHKEY_API_KEYS_RELOAD_INTERVAL", 2*time.Second, "how often to look for a changed keys file (SIGHUP reloads it at once); 0 leaves it to SIGHUP")
	e.integer(&f.FailLimit, "auth-fail-limit", "LATCHKEY_AUTH_FAIL_LIMIT", 10, "failed authentications a client address may make (per -auth-fail-window) before its requests get 429")
	e.dur(&f.FailWindow, "auth-fail-window", "LATCHKEY_AUTH_FAIL_WINDOW", time.Minute, "how long a throttled client address takes to earn -auth-fail-limit attempts back")
	e.str(&f.TLSCert, "tls-cert", "LATCHKEY_TLS_CERT", "", "PEM certificate (chain) to serve HTTPS with; needs -tls-key")
	e.str(&f.TLSKey, "tls-key", "LATCHKEY_TLS_KEY", "", "PEM private key of -tls-cert")
	e.str(&f.TLSClientCA, "tls-client-ca", "LATCHKEY_TLS_CLIENT_CA", "", "PEM CA certificates; clients must present a certificate they signed (mTLS); needs -tls-cert")
}

func (f AuthFlags) validate() []error {
	var errs []error
	check := func(bad bool, msg string) {
		if bad {
			errs = append(errs, errors.New(msg))
		}
	}
	check(f.ReloadInterval < 0, "-api-keys-reload-interval must be 0 (SIGHUP only) or positive")
	check(f.FailLimit < 1, "-auth-fail-limit must be at least 1")
	check(f.FailWindow <= 0, "-auth-fail-window must be positive")
	check((f.TLSCert == "") != (f.TLSKey == ""), "-tls-cert and -tls-key go together")
	check(f.TLSClientCA != "" && f.TLSCert == "", "-tls-client-ca needs -tls-cert and -tls-key")
	return errs
}

// loadKeys reads the keys file, if one is configured, and keeps it in step
// with the file (SIGHUP and every -api-keys-reload-interval) until the
// returned stop function is called. Without a keys file it returns nil Keys.
func (f AuthFlags) loadKeys(ctx context.Context, adminKey string, reg prometheus.Registerer, log *slog.Logger) (*auth.Keys, func(), error) {
	if f.KeysFile == "" {
		return nil, func() {}, nil
	}
	keys, err := auth.LoadKeys(auth.KeysConfig{
		Path: f.KeysFile, Read: func() ([]byte, error) { return os.ReadFile(f.KeysFile) },
		AdminSecret: adminKey, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("-api-keys: %w", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); keys.Run(ctx, f.ReloadInterval, hup) }()
	return keys, func() { signal.Stop(hup); cancel(); <-done }, nil
}

// handlersAuth is the router's view of the keys: off without a keys file.
func (f AuthFlags) handlersAuth(keys *auth.Keys) handlers.AuthConfig {
	if keys == nil {
		return handlers.AuthConfig{}
	}
	return handlers.AuthConfig{Keys: keys.Current, FailBurst: f.FailLimit, FailWindow: f.FailWindow}
}

// tenantQuotas is the lock service's view of the keys: each tenant's lease
// and waiter quotas in the active key set; none without a keys file.
func tenantQuotas(keys *auth.Keys) func(string) locks.Quota {
	if keys == nil {
		return nil
	}
	return func(tenant string) locks.Quota {
		t := keys.Current().Tenant(tenant)
		if t == nil {
			return locks.Quota{}
		}
		return locks.Quota{Leases: t.Quotas.Leases, Waiters: t.Quotas.Waiters}
	}
}

// tlsConfig is the server's TLS configuration, nil for plain HTTP: the
// certificate and key, and with -tls-client-ca a required, verified client
// certificate.
func (f AuthFlags) tlsConfig() (*tls.Config, error) {
	if f.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.TLSClientCA != "" {
		pem, err := os.ReadFile(f.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-client-ca %s: no PEM certificate in it", f.TLSClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// warnOpen logs a warning when the server listens beyond loopback with no
// keys file: anyone who can reach it can take, inspect or hold any lock.
func (f AuthFlags) warnOpen(addr string, log *slog.Logger) {
	if f.KeysFile == "" && !isLoopback(addr) {
		log.Warn("listening beyond loopback without API keys: anyone who can reach this address can take, inspect and hold any lock and spend any rate limit; set -api-keys (LATCHKEY_API_KEYS)",
			"addr", addr)
	}
}
