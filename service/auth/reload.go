package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// AdminKeyID is the ID of the key LATCHKEY_ADMIN_KEY adds to a keys file.
const AdminKeyID = "latchkey-admin-key"

// KeysConfig configures Keys.
type KeysConfig struct {
	// Path names the keys file in logs and errors.
	Path string
	// Read returns the file's current contents.
	Read func() ([]byte, error)
	// AdminSecret, when set, is one more key of the admin section, with
	// every scope, called AdminKeyID (LATCHKEY_ADMIN_KEY).
	AdminSecret string
	// Logger receives a line for every set made active and every file
	// refused; nil discards them.
	Logger *slog.Logger
	// Registerer receives latchkey_api_keys_reloads_total; nil keeps it
	// unregistered.
	Registerer prometheus.Registerer
}

// Keys is the active key set, kept in step with the keys file: Reload
// reads the file and, when it changed, makes it the active set; a file that
// cannot be read or parsed leaves the active set as it is, and says why.
type Keys struct {
	cfg     KeysConfig
	cur     atomic.Pointer[KeySet]
	reloads *prometheus.CounterVec // result: ok, error
	loaded  chan struct{}          // closed and replaced when a new set is active

	mu   sync.Mutex
	last [sha256.Size]byte
}

// LoadKeys reads the keys file once and returns Keys holding it. Returns
// the file's error when it cannot be read or parsed.
func LoadKeys(cfg KeysConfig) (*Keys, error) {
	if cfg.Path == "" || cfg.Read == nil {
		return nil, errors.New("auth: keys need a file path and a way to read it")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	k := &Keys{cfg: cfg, loaded: make(chan struct{}), reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_api_keys_reloads_total",
		Help: "Keys file reloads by result: ok (a new set is active), error (the file was refused; the old set stays).",
	}, []string{"result"})}
	k.reloads.WithLabelValues("ok")
	k.reloads.WithLabelValues("error")
	b, err := cfg.Read()
	if err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	set, err := k.parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Path, err)
	}
	k.last = sha256.Sum256(b)
	k.cur.Store(set)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(k.reloads); err != nil {
			return nil, fmt.Errorf("auth: keys metrics: %w", err)
		}
	}
	k.logActive("api keys loaded", set)
	return k, nil
}

// Current returns the active key set.
func (k *Keys) Current() *KeySet { return k.cur.Load() }

// Loaded returns a channel closed when the next set becomes active.
func (k *Keys) Loaded() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.loaded
}

func (k *Keys) parse(b []byte) (*KeySet, error) {
	set, err := Parse(b)
	if err != nil || k.cfg.AdminSecret == "" {
		return set, err
	}
	for _, key := range set.keys {
		if key.ID == AdminKeyID {
			return nil, fmt.Errorf("keys file: key id %s is the admin key's (LATCHKEY_ADMIN_KEY)", AdminKeyID)
		}
	}
	admin := &Key{ID: AdminKeyID, Scopes: AllScopes, digest: sha256.Sum256([]byte(k.cfg.AdminSecret))}
	set.keys = append(set.keys, admin)
	return set, nil
}

// Reload reads the keys file and makes it the active set when its contents
// changed since the last read (or always, with force). It reports whether
// a new set is active, and why the file was refused: the active set then
// stays, and requests go on being answered with it.
func (k *Keys) Reload(force bool) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, err := k.cfg.Read()
	if err != nil {
		return false, k.refuse(fmt.Errorf("keys file: %w", err))
	}
	sum := sha256.Sum256(b)
	if !force && sum == k.last {
		return false, nil
	}
	k.last = sum
	set, err := k.parse(b)
	if err != nil {
		return false, k.refuse(fmt.Errorf("%s: %w", k.cfg.Path, err))
	}
	k.cur.Store(set)
	close(k.loaded)
	k.loaded = make(chan struct{})
	k.reloads.WithLabelValues("ok").Inc()
	k.logActive("api keys reloaded", set)
	return true, nil
}

func (k *Keys) refuse(err error) error {
	k.reloads.WithLabelValues("error").Inc()
	k.cfg.Logger.Error("keys file refused; the active keys stay", "err", err, "file", k.cfg.Path,
		"version", k.Current().Version())
	return err
}

func (k *Keys) logActive(msg string, set *KeySet) {
	k.cfg.Logger.Info(msg, "file", k.cfg.Path, "version", set.Version(),
		"tenants", set.Tenants(), "keys", set.KeyIDs())
}

// Run reloads the file every interval when it changed (0: never by
// polling) and at once on every value from trigger (SIGHUP in the
// server), until ctx ends.
func (k *Keys) Run(ctx context.Context, interval time.Duration, trigger <-chan os.Signal) {
	store.RunReloads(ctx, interval, trigger, func(force bool) { _, _ = k.Reload(force) })
}
