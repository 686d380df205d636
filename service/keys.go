package service

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
)

// DefaultKeyPrefix prefixes every Redis key and channel Latchkey uses.
const DefaultKeyPrefix = "latchkey:"

// Character classes of names, tokens and keys. They are checked byte by byte
// (not with regexps): every request validates a name, a token or a key.
func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isNameByte(c byte) bool  { return isAlnum(c) || c == '.' || c == '_' || c == ':' || c == '-' }
func isTokenByte(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

// matches reports whether s has minLen (at least 1) to maxLen bytes, its
// first byte in first and every other byte in rest.
func matches(s string, minLen, maxLen int, first, rest func(byte) bool) bool {
	if len(s) < minLen || len(s) > maxLen || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return false
		}
	}
	return true
}

// ValidateName checks a lock name: 1–128 characters of [A-Za-z0-9._:-],
// starting with a letter or digit. Returns a *ValidationError otherwise.
func ValidateName(name string) error {
	if !matches(name, 1, 128, isAlnum, isNameByte) {
		return invalid("name", "format",
			"lock name must be 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit")
	}
	return nil
}

// ValidateToken checks a client-supplied lease token: 22–128 base64url
// characters. Returns a *ValidationError otherwise.
func ValidateToken(token string) error {
	if !matches(token, 22, 128, isTokenByte, isTokenByte) {
		return invalid("Lock-Token", "format", "Lock-Token must be 22-128 base64url characters (A-Z a-z 0-9 - _)")
	}
	return nil
}

// NewToken returns 128 random bits, base64url encoded (22 characters).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// lockKeys names the keys of one lock. All share the hash tag {name}, so a
// script touching them stays on one Redis Cluster slot.
type lockKeys struct {
	lock    string // hash: token, count, fence, ttl
	fence   string // fence counter
	channel string // pub/sub channel for wake-ups
	waiters string // zset: waiter token -> deadline (ms, Redis clock)
	queue   string // list: fair waiters in arrival order
	lost    string // hash: token -> why that token lost its keep-alive lease
	name    string // the lock's name (keep-alive registry members carry it)
}

// keys names the keys of the lock called name. They are cut from one
// string, one allocation for all six: every lock request needs them.
func (s *Service) keys(name string) lockKeys {
	kinds := [...]string{"lock:", "fence:", "unlock:", "waiters:", "queue:", "lost:"}
	var sb strings.Builder
	sb.Grow(len(kinds) * (len(s.cfg.KeyPrefix) + len("waiters:{}") + len(name)))
	var ends [len(kinds) + 1]int
	for i, k := range kinds {
		sb.WriteString(s.cfg.KeyPrefix)
		sb.WriteString(k)
		sb.WriteByte('{')
		sb.WriteString(name)
		sb.WriteByte('}')
		ends[i+1] = sb.Len()
	}
	all := sb.String()
	key := func(i int) string { return all[ends[i]:ends[i+1]] }
	return lockKeys{lock: key(0), fence: key(1), channel: key(2), waiters: key(3), queue: key(4), lost: key(5), name: name}
}
