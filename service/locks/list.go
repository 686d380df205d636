package locks

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// Listing what is held. A page is one bounded walk of the tenant's keys
// with SCAN (store.Scan: at most store.DefaultScanCalls calls of COUNT
// store.DefaultScanCount, every primary of a cluster in turn), matching the
// state keys of one primitive under the tenant's prefix, then one inspect
// per key found, as GET answers it. SCAN rather than an index the scripts
// keep: the scripts stay as they are, nothing in Redis grows for a listing,
// and an expired lease cannot linger in an index. A page may hold fewer
// items than its limit (the walk's bound was reached first, or the keys
// found were no longer held) and still have a next cursor.

// Listing limits.
const (
	DefaultListLimit = 100  // items of a page when the request names no limit
	MaxListLimit     = 1000 // the most items a page may ask for
	maxCursorLen     = 512  // the longest cursor text taken
	listInspects     = 32   // inspect calls of one page in flight at once
)

// ListRequest asks for a page of the held names of one primitive in the
// namespace of the tenant the context acts for.
type ListRequest struct {
	Prefix string // only names starting with it; "" for every name
	Limit  int    // at most this many items; 0 is DefaultListLimit
	Cursor string // the previous page's NextCursor; "" for the first page
}

// Page is one page of a listing: the items, by name, and the cursor of the
// next page, "" on the last.
type Page[T any] struct {
	Items      []T
	NextCursor string
}

// ListLocks returns a page of the exclusive locks held, each as Inspect
// without a token answers it. Returns a *ValidationError naming limit,
// prefix or cursor (a cursor that is not one this service gave for the
// same tenant, primitive and prefix), and an error wrapping ErrUnavailable
// when Redis cannot be asked.
func (s *Service) ListLocks(ctx context.Context, req ListRequest) (Page[LockState], error) {
	return listHeld(ctx, s, kindMutex, req, func(ctx context.Context, name string) (LockState, bool, error) {
		st, err := s.Inspect(ctx, name, "")
		return st, st.Held, err
	})
}

// ListRWLocks returns a page of the read/write locks held (for write or by
// readers), each as InspectRW without a token answers it. Returns the
// errors of ListLocks.
func (s *Service) ListRWLocks(ctx context.Context, req ListRequest) (Page[RWState], error) {
	return listHeld(ctx, s, kindRW, req, func(ctx context.Context, name string) (RWState, bool, error) {
		st, err := s.InspectRW(ctx, name, "")
		return st, st.WriteHeld || st.Readers > 0, err
	})
}

// ListSemaphores returns a page of the semaphores with permits held, each
// as InspectSemaphore without a token answers it. Returns the errors of
// ListLocks.
func (s *Service) ListSemaphores(ctx context.Context, req ListRequest) (Page[SemaphoreState], error) {
	return listHeld(ctx, s, kindSem, req, func(ctx context.Context, name string) (SemaphoreState, bool, error) {
		st, err := s.InspectSemaphore(ctx, name, "")
		return st, st.Holders > 0, err
	})
}

// listHeld is the listing of what is held every primitive shares: inspect
// reads one name's state and says whether it is held.
func listHeld[T any](ctx context.Context, s *Service, k kind, req ListRequest,
	inspect func(context.Context, string) (T, bool, error)) (Page[T], error) {
	return listNames(ctx, s, listing{kind: k, what: "held", key: func(lk lockKeys) string { return lk.lock }}, req, inspect)
}

// listing is what a listing walks: the keys of one role (key picks it from
// a name's keys) of one primitive. what names it in its cursors, so a
// cursor of one listing is refused by another.
type listing struct {
	kind kind
	what string
	key  func(lockKeys) string
}

// listNames is the walk every listing shares: a bounded SCAN of the keys
// of l under the tenant's prefix whose name starts with req.Prefix, then
// inspect of each name found, in name order; inspect says whether the
// name is an item of the page.
func listNames[T any](ctx context.Context, s *Service, l listing, req ListRequest,
	inspect func(context.Context, string) (T, bool, error)) (Page[T], error) {
	limit, err := checkList(req)
	if err != nil {
		return Page[T]{}, err
	}
	tenant := store.TenantOf(ctx)
	c := cursorScope{tenant: tenant, kind: l.kind, what: l.what, prefix: req.Prefix}
	// every key of the walk starts with head
	head := keyHead(l.key(tenantKeys(s.prefix, tenant, l.kind, "")))
	from, err := s.openCursor(ctx, c, head, req.Cursor)
	if err != nil {
		return Page[T]{}, err
	}
	page, err := s.st.Scan(ctx, store.ScanRequest{Match: store.GlobEscape(head+req.Prefix) + "*}", From: from, Want: limit})
	if err != nil {
		return Page[T]{}, err
	}
	var names []string
	for _, key := range page.Keys {
		name, ok := strings.CutPrefix(key, head)
		if name, ok = strings.CutSuffix(name, "}"); ok && ValidateName(name) == nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names) // SCAN may return a key twice
	states, held, err := inspectAll(ctx, names, inspect)
	if err != nil {
		return Page[T]{}, err
	}
	out := Page[T]{Items: make([]T, 0, len(states))}
	for i, st := range states {
		if held[i] {
			out.Items = append(out.Items, st)
		}
	}
	if !page.Done {
		out.NextCursor, err = s.sealCursor(ctx, c, head, page.Next)
	}
	return out, err
}

// MaxLostPerName is the most lost leases a name's item of a lost-lease
// listing carries, the newest; Truncated says there were more.
const MaxLostPerName = 100

// LostLease is a lease a name lost, as the scripts recorded it when it
// ended: never its token.
type LostLease struct {
	Reason string    // one of the Lost* reasons
	LostAt time.Time // when the lease ended (Redis clock); for expired, when that was seen
	Fence  int64     // the lease's fence, 0 when the record does not know it
	Owner  string    // the lease's owner text, "" when none or not known
}

// LostState is a name and the leases it lost that are still remembered
// (for the lost-reason retention), newest first.
type LostState struct {
	Name      string
	Leases    []LostLease
	Truncated bool // more leases were lost than MaxLostPerName
}

var lostListScript = store.NewScript("lost_list", lua.Source("lost_list"))

// ListLost returns a page of the names of primitive kind ("lock", "rwlock",
// "semaphore" or "election") that lost a lease recently: a keep-alive lease that ran
// out (expired, max_hold, heartbeat_missed) or a force-release, within the
// lost-reason retention (Config.LostTTL). A plain lease that reached its
// TTL leaves no record. Walked as ListLocks walks held names, over the
// names' lost-lease hashes. Returns the errors of ListLocks, and a
// *ValidationError naming kind for another kind.
func (s *Service) ListLost(ctx context.Context, kind string, req ListRequest) (Page[LostState], error) {
	k, ok := kindOfLabel(kind)
	if !ok {
		return Page[LostState]{}, invalid("kind", "oneof", "kind must be lock, rwlock, semaphore or election")
	}
	l := listing{kind: k, what: "lost", key: func(lk lockKeys) string { return lk.lost }}
	return listNames(ctx, s, l, req, func(ctx context.Context, name string) (LostState, bool, error) {
		st, err := s.lost(ctx, k, name)
		return st, len(st.Leases) > 0, err
	})
}

// lost reads the lost leases of name of kind k.
func (s *Service) lost(ctx context.Context, k kind, name string) (LostState, error) {
	return s.lostOf(ctx, s.keysIn(ctx, k, name))
}

// lostOf reads the lost leases of the name of keys k.
func (s *Service) lostOf(ctx context.Context, k lockKeys) (LostState, error) {
	name := k.name
	res, err := s.st.Run(ctx, lostListScript, []string{k.lost},
		MaxLostPerName, // ARGV[1] the most records to answer
	)
	if err != nil {
		return LostState{}, err
	}
	arr, _ := res.([]any)
	st := LostState{Name: name}
	if len(arr) == 0 {
		return st, nil
	}
	st.Truncated = arr[0] == int64(1)
	for i := 1; i+3 < len(arr); i += 4 {
		reason, _ := arr[i].(string)
		atText, _ := arr[i+1].(string)
		fenceText, _ := arr[i+2].(string)
		owner, _ := arr[i+3].(string)
		at, _ := strconv.ParseInt(atText, 10, 64)
		fence, _ := strconv.ParseInt(fenceText, 10, 64)
		st.Leases = append(st.Leases, LostLease{Reason: reason, LostAt: time.UnixMilli(at).UTC(), Fence: fence, Owner: owner})
	}
	return st, nil
}

// kindOfLabel is the primitive a label names.
func kindOfLabel(label string) (kind, bool) {
	for _, k := range []kind{kindMutex, kindRW, kindSem, kindEl} {
		if k.label() == label {
			return k, true
		}
	}
	return kindMutex, false
}

// inspectAll reads the state of every name with inspect, listInspects at a time (the
// store sends concurrent calls together). Returns the first error.
func inspectAll[N, T any](ctx context.Context, names []N,
	inspect func(context.Context, N) (T, bool, error)) ([]T, []bool, error) {
	states, held, errs := make([]T, len(names)), make([]bool, len(names)), make([]error, len(names))
	sem := make(chan struct{}, listInspects)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			states[i], held[i], errs[i] = inspect(ctx, name)
		})
	}
	wg.Wait()
	return states, held, errors.Join(errs...)
}

// checkList checks a listing request's limit and prefix and returns the
// limit to use. Returns a *ValidationError naming the field.
func checkList(req ListRequest) (int, error) {
	switch {
	case req.Limit < 0:
		return 0, invalid("limit", "min", "limit must be at least 1")
	case req.Limit > MaxListLimit:
		return 0, invalid("limit", "max", "limit must be at most %d", MaxListLimit)
	case req.Prefix != "" && !store.Matches(req.Prefix, 1, 128, store.IsAlnum, isNameByte):
		return 0, invalid("prefix", "format",
			"prefix must be the start of a lock name: 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit")
	case req.Limit == 0:
		return DefaultListLimit, nil
	}
	return req.Limit, nil
}

// stateKeyHead is what the state key of every name of kind k of tenant
// starts with, such as "latchkey:t:acme:rw:lock:{" (see keyHead).
func stateKeyHead(prefix, tenant string, k kind) string {
	return keyHead(tenantKeys(prefix, tenant, k, "").lock)
}

// keyHead is what a key of one role of every name starts with: the key of
// that role of the name "", without its closing brace.
func keyHead(keyOfNoName string) string {
	return strings.TrimSuffix(keyOfNoName, "}")
}

// label is a primitive's name in cursors and metric labels.
func (k kind) label() string {
	switch k {
	case kindRW:
		return "rwlock"
	case kindSem:
		return "semaphore"
	case kindEl:
		return "election"
	}
	return "lock"
}

// cursorScope is what a cursor is valid for: one tenant's listing (what:
// held or lost) of one primitive with one prefix.
type cursorScope struct {
	tenant string
	kind   kind
	what   string
	prefix string
}

// A cursor is base64url of the walk's position (a version byte, then the
// slot and SCAN cursor as uvarints, the length and text of the last key the
// page returned from its last SCAN step, less the state-key head every key
// of the listing starts with, then the node ID) followed by the first 16
// bytes of an HMAC-SHA256, keyed with the listing secret, over the cursor's
// scope and the position. The secret is created once in Redis
// (list_secret.lua) and shared by every instance; a cursor from another
// tenant, primitive or prefix, or altered in any byte, does not verify.
const (
	cursorVersion = 2
	cursorMACLen  = 16
)

var listSecretScript = store.NewScript("list_secret", lua.Source("list_secret"))

// listSecret is the listing secret as this instance last read it.
type listSecret struct {
	mu  sync.Mutex
	key []byte
}

var errBadCursor = invalid("cursor", "format",
	"cursor must be the next_cursor of an earlier page of the same listing (same kind and prefix), unchanged")

// secret returns the listing secret, read from Redis on first use or when
// fresh is set; with create, one is made there when none is. Without
// create it returns nil when Redis has none: no cursor can be good.
func (s *Service) secret(ctx context.Context, fresh, create bool) ([]byte, error) {
	ls := &s.listSecret
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.key != nil && !fresh {
		return ls.key, nil
	}
	candidate := ""
	if create {
		var b [32]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
		candidate = base64.RawStdEncoding.EncodeToString(b[:])
	}
	res, err := s.st.Run(ctx, listSecretScript, []string{s.prefix + "list:secret"},
		candidate, // ARGV[1] a new secret, or "" to read only
	)
	if err != nil {
		return nil, err
	}
	key, ok := res.(string)
	switch {
	case !ok || key == "" && create:
		return nil, errors.New("locks: list_secret answered no secret")
	case key == "":
		return nil, nil
	}
	ls.key = []byte(key)
	return ls.key, nil
}

// sealCursor returns the cursor text of pos in scope c, whose keys start
// with head.
func (s *Service) sealCursor(ctx context.Context, c cursorScope, head string, pos store.ScanPosition) (string, error) {
	key, err := s.secret(ctx, false, true)
	if err != nil {
		return "", err
	}
	after, _ := strings.CutPrefix(pos.After, head) // every key of the walk starts with head
	b := []byte{cursorVersion}
	b = binary.AppendUvarint(b, uint64(pos.Slot))
	b = binary.AppendUvarint(b, pos.Cursor)
	b = binary.AppendUvarint(b, uint64(len(after)))
	b = append(b, after...)
	b = append(b, pos.Node...)
	return base64.RawURLEncoding.EncodeToString(append(b, cursorMAC(key, c, b)...)), nil
}

// openCursor returns the position a cursor text of scope c, whose keys
// start with head, stands for, the beginning for "". A cursor that does not verify with the secret this
// instance holds is checked once more against the secret in Redis (it may
// have been made anew); opening never creates a secret, so a refused
// cursor changes nothing in Redis. Returns errBadCursor for a cursor that
// is not one this service sealed for c.
func (s *Service) openCursor(ctx context.Context, c cursorScope, head, text string) (store.ScanPosition, error) {
	if text == "" {
		return store.ScanPosition{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || len(text) > maxCursorLen || len(raw) <= cursorMACLen {
		return store.ScanPosition{}, errBadCursor
	}
	body, mac := raw[:len(raw)-cursorMACLen], raw[len(raw)-cursorMACLen:]
	key, err := s.secret(ctx, false, false)
	if err != nil {
		return store.ScanPosition{}, err
	}
	if key != nil && !hmac.Equal(mac, cursorMAC(key, c, body)) {
		if key, err = s.secret(ctx, true, false); err != nil {
			return store.ScanPosition{}, err
		}
	}
	if key == nil || !hmac.Equal(mac, cursorMAC(key, c, body)) {
		return store.ScanPosition{}, errBadCursor
	}
	if body[0] != cursorVersion {
		return store.ScanPosition{}, errBadCursor
	}
	rest := body[1:]
	var v [3]uint64
	for i := range v {
		n := 0
		if v[i], n = binary.Uvarint(rest); n <= 0 {
			return store.ScanPosition{}, errBadCursor
		}
		rest = rest[n:]
	}
	if v[0] >= store.ClusterSlots || v[2] > uint64(len(rest)) {
		return store.ScanPosition{}, errBadCursor
	}
	pos := store.ScanPosition{Slot: int(v[0]), Cursor: v[1], Node: string(rest[v[2]:])}
	if v[2] > 0 {
		pos.After = head + string(rest[:v[2]])
	}
	return pos, nil
}

// cursorMAC is the MAC of a cursor's body in scope c.
func cursorMAC(key []byte, c cursorScope, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range []string{"latchkey list cursor", c.tenant, c.kind.label(), c.what, c.prefix} {
		m.Write([]byte(part))
		m.Write([]byte{0}) // no part holds a NUL: each is told from the next
	}
	m.Write(body)
	return m.Sum(nil)[:cursorMACLen]
}
