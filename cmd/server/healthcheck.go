package main

import (
	"context"
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
func healthCheck(ctx context.Context, addr string, stdout io.Writer) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("healthcheck: -addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/healthz"
	ctx, cancel := context.WithTimeout(ctx, healthCheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
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
