// Package auth is Latchkey's access control: the API keys file (tenants,
// their keys, scopes, name restrictions and quotas), the lookup of a bearer
// secret, and each tenant's lease and waiter quotas in Redis.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/latchkey/latchkey/internal/yamlcheck"
	"github.com/latchkey/latchkey/service/store"
)

// Scope is a permission a key carries.
type Scope string

// The scopes. ScopeLocksWrite covers every lock primitive's acquire,
// renew, release and hold; ScopeAdmin covers what acts on another's lease.
const (
	ScopeLocksRead      Scope = "locks:read"
	ScopeLocksWrite     Scope = "locks:write"
	ScopeRateLimitCheck Scope = "ratelimit:check"
	ScopeRateLimitGate  Scope = "ratelimit:gate"
	ScopeAdmin          Scope = "admin"
)

// AllScopes lists every scope, in the order documentation shows them.
var AllScopes = []Scope{ScopeLocksRead, ScopeLocksWrite, ScopeRateLimitCheck, ScopeRateLimitGate, ScopeAdmin}

// Quotas bound what one tenant may have or do at once; 0 is unlimited.
type Quotas struct {
	Leases            int64 `yaml:"leases"`              // leases held at once
	Waiters           int64 `yaml:"waiters"`             // acquires waiting at once
	RequestsPerSecond int64 `yaml:"requests_per_second"` // requests of all the tenant's keys, a token bucket of this size refilled per second
}

// Tenant is one namespace of the keys file.
type Tenant struct {
	Name   string
	Quotas Quotas
}

// Key is one API key: who it is (its ID, never its secret), the tenant it
// acts for ("" for an admin key of the file's admin section, which acts on
// the shared namespace), its scopes and the lock names it may use.
type Key struct {
	ID     string
	Tenant *Tenant // nil for an admin-section key
	Scopes []Scope
	// Names are the name patterns the key may use: a pattern ending in '*'
	// is a prefix, any other an exact name. Empty: every name.
	Names []string

	digest [sha256.Size]byte
}

// TenantName is the key's tenant's name, "" for an admin-section key.
func (k *Key) TenantName() string {
	if k.Tenant == nil {
		return ""
	}
	return k.Tenant.Name
}

// Has reports whether the key carries scope s.
func (k *Key) Has(s Scope) bool { return slices.Contains(k.Scopes, s) }

// MayName reports whether the key may use the lock called name.
func (k *Key) MayName(name string) bool {
	if len(k.Names) == 0 {
		return true
	}
	for _, p := range k.Names {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

// KeySet is a parsed keys file. It is never changed once parsed: a reload
// parses a new one.
type KeySet struct {
	keys    []*Key
	tenants map[string]*Tenant
	public  map[string]bool
	version string
}

// Lookup returns the key whose SHA-256 is that of secret, or nil. Every
// key's hash is compared, in constant time, whatever matches: the time it
// takes tells nothing of which key, or how much of one, matched.
func (s *KeySet) Lookup(secret string) *Key {
	if s == nil {
		return nil
	}
	d := sha256.Sum256([]byte(secret))
	var found *Key
	for _, k := range s.keys {
		if subtle.ConstantTimeCompare(d[:], k.digest[:]) == 1 {
			found = k
		}
	}
	return found
}

// Tenants returns the file's tenant names, sorted: the only tenant values a
// metric label may take.
func (s *KeySet) Tenants() []string {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.tenants))
	for n := range s.tenants {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Tenant returns the tenant called name, or nil.
func (s *KeySet) Tenant(name string) *Tenant {
	if s == nil {
		return nil
	}
	return s.tenants[name]
}

// KeyIDs returns every key's ID, sorted.
func (s *KeySet) KeyIDs() []string {
	if s == nil {
		return nil
	}
	ids := make([]string, len(s.keys))
	for i, k := range s.keys {
		ids[i] = k.ID
	}
	sort.Strings(ids)
	return ids
}

// PublicGate reports whether the gate of policy answers without a key.
func (s *KeySet) PublicGate(policy string) bool { return s != nil && s.public[policy] }

// Version identifies the file's contents: the first 12 hex digits of their
// SHA-256 (which says nothing of any secret: the file holds only hashes).
func (s *KeySet) Version() string {
	if s == nil {
		return ""
	}
	return s.version
}

// fileKeys is the keys file as written; an expect tag says in words what
// its field takes, for the file's errors (see yamlcheck).
type fileKeys struct {
	Defaults struct {
		Quotas Quotas `yaml:"quotas"`
	} `yaml:"defaults"`
	Tenants map[string]struct {
		Quotas *Quotas   `yaml:"quotas"`
		Keys   []fileKey `yaml:"keys" expect:"a list of keys"`
	} `yaml:"tenants" expect:"a map of tenant names to tenants"`
	Admin struct {
		Keys []fileKey `yaml:"keys" expect:"a list of keys"`
	} `yaml:"admin"`
	PublicGate []string `yaml:"public_gate" expect:"a list of policy names"`
}

type fileKey struct {
	ID     string   `yaml:"id"`
	SHA256 string   `yaml:"sha256"`
	Scopes []string `yaml:"scopes" expect:"a list of scopes"`
	Names  []string `yaml:"names" expect:"a list of lock names and name prefixes"`
}

// Parse reads a keys file (YAML). Unknown fields, tenant names other than
// 1-32 characters of a-z 0-9 -, key IDs used twice, a hash that is not 64
// hex digits or is used twice, unknown scopes, a key without scopes, bad
// name patterns and negative quotas are errors, each naming where it is; so
// is a file that names no key at all (empty, or written only in part),
// which would refuse every request.
func Parse(b []byte) (*KeySet, error) {
	var f fileKeys
	if err := yamlcheck.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	sum := sha256.Sum256(b)
	set := &KeySet{tenants: map[string]*Tenant{}, public: map[string]bool{}, version: hex.EncodeToString(sum[:6])}
	var errs []error
	if err := f.Defaults.Quotas.validate("defaults.quotas"); err != nil {
		errs = append(errs, err)
	}
	ids, digests := map[string]string{}, map[[sha256.Size]byte]string{}
	add := func(where string, t *Tenant, fk fileKey) {
		k, err := newKey(where, t, fk)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if prev, dup := ids[k.ID]; dup {
			errs = append(errs, fmt.Errorf("%s: key id %q is also used at %s", where, k.ID, prev))
			return
		}
		if prev, dup := digests[k.digest]; dup {
			errs = append(errs, fmt.Errorf("%s: sha256 is also the hash of key %s: give every key its own secret", where, prev))
			return
		}
		ids[k.ID], digests[k.digest] = where, k.ID
		set.keys = append(set.keys, k)
	}
	names := make([]string, 0, len(f.Tenants))
	for n := range f.Tenants {
		names = append(names, n)
	}
	sort.Strings(names) // errors and keys in a stable order
	for _, n := range names {
		ft := f.Tenants[n]
		where := "tenants." + n
		if !ValidTenantName(n) {
			errs = append(errs, fmt.Errorf("%s: tenant name must be 1-32 characters of a-z 0-9 -", where))
			continue
		}
		t := &Tenant{Name: n, Quotas: f.Defaults.Quotas}
		if ft.Quotas != nil {
			if err := ft.Quotas.validate(where + ".quotas"); err != nil {
				errs = append(errs, err)
			}
			t.Quotas = ft.Quotas.or(f.Defaults.Quotas)
		}
		set.tenants[n] = t
		for i, fk := range ft.Keys {
			add(fmt.Sprintf("%s.keys[%d]", where, i), t, fk)
		}
	}
	for i, fk := range f.Admin.Keys {
		add(fmt.Sprintf("admin.keys[%d]", i), nil, fk)
	}
	for i, p := range f.PublicGate {
		if !validPattern(p, false) {
			errs = append(errs, fmt.Errorf("public_gate[%d]: %q is not a policy name", i, p))
			continue
		}
		set.public[p] = true
	}
	if len(errs) == 0 && len(set.keys) == 0 {
		errs = append(errs, errors.New("it names no key, so every request would get 401: "+
			"list at least one under tenants.NAME.keys or admin.keys (to serve without keys, give no keys file)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	return set, nil
}

func newKey(where string, t *Tenant, fk fileKey) (*Key, error) {
	k := &Key{ID: fk.ID, Tenant: t, Names: fk.Names}
	if !store.Matches(fk.ID, 1, 64, store.IsAlnum, isIDByte) {
		return nil, fmt.Errorf("%s: id must be 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", where)
	}
	where += " (" + fk.ID + ")"
	raw, err := hex.DecodeString(fk.SHA256)
	if err != nil || len(raw) != sha256.Size {
		return nil, fmt.Errorf("%s: sha256 must be the 64 hex digits of the secret's SHA-256 (printf %%s \"$SECRET\" | sha256sum)", where)
	}
	copy(k.digest[:], raw)
	if len(fk.Scopes) == 0 {
		return nil, fmt.Errorf("%s: scopes is empty: name at least one of %s", where, scopeList())
	}
	for _, s := range fk.Scopes {
		if !slices.Contains(AllScopes, Scope(s)) {
			return nil, fmt.Errorf("%s: unknown scope %q: want %s", where, s, scopeList())
		}
		if !k.Has(Scope(s)) {
			k.Scopes = append(k.Scopes, Scope(s))
		}
	}
	for i, p := range fk.Names {
		if !validPattern(p, true) {
			return nil, fmt.Errorf("%s: names[%d] %q must be a lock name, or a name prefix ending in *", where, i, p)
		}
	}
	return k, nil
}

func (q Quotas) validate(where string) error {
	if q.Leases < 0 || q.Waiters < 0 || q.RequestsPerSecond < 0 {
		return fmt.Errorf("%s: quotas must be 0 (unlimited) or positive", where)
	}
	return nil
}

// or fills q's unset (zero) quotas from def.
func (q Quotas) or(def Quotas) Quotas {
	if q.Leases == 0 {
		q.Leases = def.Leases
	}
	if q.Waiters == 0 {
		q.Waiters = def.Waiters
	}
	if q.RequestsPerSecond == 0 {
		q.RequestsPerSecond = def.RequestsPerSecond
	}
	return q
}

// ValidTenantName reports whether name is a tenant name: 1-32 characters of
// a-z 0-9 -. Tenant names never hold ':' or braces, so a tenant's key
// prefix can neither reach into another's nor break a Redis Cluster hash tag.
func ValidTenantName(name string) bool {
	return store.Matches(name, 1, 32, isTenantByte, isTenantByte)
}

func isTenantByte(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' }
func isIDByte(c byte) bool     { return store.IsAlnum(c) || c == '.' || c == '_' || c == '-' }
func isNameByte(c byte) bool   { return isIDByte(c) || c == ':' }

// validPattern reports a lock name (or policy name), or with star a name
// prefix ending in '*' ("billing:*", or "*" alone for every name).
func validPattern(p string, star bool) bool {
	if star {
		if rest, ok := strings.CutSuffix(p, "*"); ok {
			return rest == "" || store.Matches(rest, 1, 127, store.IsAlnum, isNameByte)
		}
	}
	return store.Matches(p, 1, 128, store.IsAlnum, isNameByte)
}

func scopeList() string {
	s := make([]string, len(AllScopes))
	for i, sc := range AllScopes {
		s[i] = string(sc)
	}
	return strings.Join(s, ", ")
}
