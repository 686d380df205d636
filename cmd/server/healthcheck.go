package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthCheckTimeout bounds the whole probe, well inside a container
// runtime's usual 30s health-check timeout.
const healthCheckTimeout = 3 * time.Second

// healthCheck probes GET /healthz of the server listening on addr and
// returns an error unless it answers 200. A wildcard or empty host (":8080",
// "0.0.0.0:8080", "[::]:8080") is probed on loopback. It lets a container
// image without a shell or curl declare a HEALTHCHECK on its own binary.
// With tlsCfg (the server's -tls-cert) it probes over HTTPS, trusting any
// certificate (the probe is of this host's own server), and presents the
// server's certificate as its client certificate: with -tls-client-ca the
// probe passes when that CA signed it for client authentication too.
func healthCheck(ctx context.Context, addr string, tlsCfg *tls.Config, stdout io.Writer) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("healthcheck: -addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme, client := "http", http.DefaultClient
	if tlsCfg != nil {
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // a liveness probe of the server on this host
			Certificates:       tlsCfg.Certificates,
		}}}
	}
	url := scheme + "://" + net.JoinHostPort(host, port) + "/healthz"
	ctx, cancel := context.WithTimeout(ctx, healthCheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s: status %d, want 200", url, resp.StatusCode)
	}
	fmt.Fprintf(stdout, "healthy: GET %s: %d\n", url, resp.StatusCode)
	return nil
}
