package ratelimit

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// ReloaderConfig configures a Reloader.
type ReloaderConfig struct {
	// Path names the policy file in logs and errors; a name ending in .json
	// is parsed as JSON, any other as YAML (see ParsePolicies).
	Path string
	// Read returns the file's current contents (the server reads Path).
	Read func() ([]byte, error)
	// Complete turns the file's policies into the full set, for example by
	// adding policies configured elsewhere, or refuses them; nil takes them
	// as they are.
	Complete func([]Policy) ([]Policy, error)
	// Logger receives a line for every set made active and every file
	// refused; nil discards them.
	Logger *slog.Logger
	// Registerer receives latchkey_ratelimit_policy_reloads_total; nil keeps
	// it unregistered.
	Registerer prometheus.Registerer
}

// Reloader keeps a Service's policies in step with a policy file. Reload
// reads the file and, when its contents changed since the last read, makes
// its policies the active set (see SetPolicies); a file that cannot be read
// or holds a bad set leaves the active set as it is, and says why.
type Reloader struct {
	svc     *Service
	cfg     ReloaderConfig
	reloads *prometheus.CounterVec // result: ok, error

	mu      sync.Mutex
	last    [sha256.Size]byte // of the contents last read
	read    bool              // whether last is set
	lastErr string            // why the file was last refused; "" after a success
}

// NewReloader returns a Reloader of svc's policies from cfg.Path. It reads
// nothing until Reload or Run.
func NewReloader(svc *Service, cfg ReloaderConfig) (*Reloader, error) {
	if cfg.Path == "" || cfg.Read == nil {
		return nil, errors.New("ratelimit: reloader needs a policy file path and a way to read it")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{svc: svc, cfg: cfg, reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_policy_reloads_total",
		Help: "Policy file reloads by result: ok (a new set is active), error (the file was refused; the old set stays).",
	}, []string{"result"})}
	r.reloads.WithLabelValues("ok")
	r.reloads.WithLabelValues("error")
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.reloads); err != nil {
			return nil, fmt.Errorf("ratelimit: reloader metrics: %w", err)
		}
	}
	return r, nil
}

// Reload reads the policy file and applies it. Unless force is set, a file
// whose contents are those of the last read changes nothing (neither a log
// line nor a metric), so polling it is cheap and quiet. It returns the
// active set, whether it changed, and why the file was refused.
func (r *Reloader) Reload(force bool) (PolicySet, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set, changed, err := r.apply(force)
	if err != nil {
		return r.refuse(err, force)
	}
	r.lastErr = ""
	if changed {
		r.reloads.WithLabelValues("ok").Inc()
		r.cfg.Logger.Info("rate-limit policies reloaded", "file", r.cfg.Path, "version", set.Version,
			"policies", len(set.Policies))
	}
	return set, changed, nil
}

// Load reads the policy file and makes its policies the active set, as
// Reload(true) does, for start-up: it neither logs nor counts, and returns
// why a file was refused, so that the caller can refuse to start with it.
func (r *Reloader) Load() (PolicySet, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set, _, err := r.apply(true)
	return set, err
}

// apply reads the file and, when forced or its contents changed since the
// last read, makes its completed policies the active set. Its errors name
// the file.
func (r *Reloader) apply(force bool) (PolicySet, bool, error) {
	b, err := r.cfg.Read()
	if err != nil {
		return PolicySet{}, false, fmt.Errorf("policy file: %w", err)
	}
	sum := sha256.Sum256(b)
	if !force && r.read && sum == r.last {
		return r.svc.ActivePolicies(), false, nil
	}
	r.last, r.read = sum, true
	ps, err := ParsePolicyFile(r.cfg.Path, b)
	if err != nil {
		return PolicySet{}, false, err
	}
	if r.cfg.Complete != nil {
		if ps, err = r.cfg.Complete(ps); err != nil {
			return PolicySet{}, false, fmt.Errorf("policy file %s: %w", r.cfg.Path, err)
		}
	}
	set, changed, err := r.svc.SetPolicies(ps)
	if err != nil {
		return PolicySet{}, false, fmt.Errorf("policy file %s: %w", r.cfg.Path, err)
	}
	return set, changed, nil
}

// ParsePolicyFile parses b, the contents of the policy file named path: as
// JSON when the name ends in .json, as YAML otherwise (see ParsePolicies).
// Its errors name the file.
func ParsePolicyFile(path string, b []byte) ([]Policy, error) {
	ps, err := ParsePolicies(b, strings.EqualFold(filepath.Ext(path), ".json"))
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	return ps, nil
}

// refuse counts and logs a file that was not applied; the active set stays.
// The same refusal again (a file that stays missing) is logged and counted
// once, unless force is set.
func (r *Reloader) refuse(err error, force bool) (PolicySet, bool, error) {
	if !force && err.Error() == r.lastErr {
		return r.svc.ActivePolicies(), false, err
	}
	r.lastErr = err.Error()
	r.reloads.WithLabelValues("error").Inc()
	active := r.svc.ActivePolicies()
	r.cfg.Logger.Error("rate-limit policy file refused; the active policies stay", "err", err,
		"file", r.cfg.Path, "version", active.Version)
	return active, false, err
}

// Run reloads the file every interval (when it changed; interval 0 turns
// polling off) and at once, changed or not, on every value from trigger
// (SIGHUP in the server), until ctx ends.
func (r *Reloader) Run(ctx context.Context, interval time.Duration, trigger <-chan os.Signal) {
	store.RunReloads(ctx, interval, trigger, func(force bool) { _, _, _ = r.Reload(force) })
}
