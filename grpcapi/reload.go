package grpcapi

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Reloader keeps the envoy configuration of a file or directory current,
// as the policies file's reloader does: a configuration that fails to load
// keeps the active one, and is counted and logged.
type Reloader struct {
	path     string
	validate func(ratelimit.Limit) error
	log      *slog.Logger
	cur      atomic.Pointer[EnvoyConfig]
	reloads  *prometheus.CounterVec // result
}

// NewReloader loads path once. Returns its error: a server does not start
// on a configuration that does not load.
func NewReloader(path string, validate func(ratelimit.Limit) error, reg prometheus.Registerer, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{path: path, validate: validate, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_envoy_config_reloads_total",
			Help: "Reloads of the envoy configuration by result: ok, refused.",
		}, []string{"result"})}
	c, err := LoadConfig(path, validate)
	if err != nil {
		return nil, err
	}
	r.cur.Store(c)
	if reg != nil {
		reg.MustRegister(r.reloads)
	}
	return r, nil
}

// Current returns the active configuration.
func (r *Reloader) Current() *EnvoyConfig { return r.cur.Load() }

// Reload loads the configuration again. On an error the active one stays.
func (r *Reloader) Reload() error {
	c, err := LoadConfig(r.path, r.validate)
	if err != nil {
		r.reloads.WithLabelValues("refused").Inc()
		r.log.Error("envoy configuration refused; the active one stays", "path", r.path, "err", err)
		return err
	}
	r.cur.Store(c)
	r.reloads.WithLabelValues("ok").Inc()
	r.log.Info("envoy configuration loaded", "path", r.path, "domains", len(c.domains))
	return nil
}

// Run reloads on every trigger and every interval (0: none) until ctx ends,
// in the loop every reloaded file shares (store.RunReloads).
func (r *Reloader) Run(ctx context.Context, interval time.Duration, trigger <-chan os.Signal) {
	store.RunReloads(ctx, interval, trigger, func(bool) { _ = r.Reload() })
}
