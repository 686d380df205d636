package service

import (
	"crypto/rand"
	"encoding/base64"
	"regexp"
)

// DefaultKeyPrefix prefixes every Redis key and channel Latchkey uses.
const DefaultKeyPrefix = "latchkey:"

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`)
)

// ValidateName checks a lock name: 1–128 characters of [A-Za-z0-9._:-],
// starting with a letter or digit. Returns a *ValidationError otherwise.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return invalid("name", "format",
			"lock name must be 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit")
	}
	return nil
}

// ValidateToken checks a client-supplied lease token: 22–128 base64url
// characters. Returns a *ValidationError otherwise.
func ValidateToken(token string) error {
	if !tokenRE.MatchString(token) {
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

func (s *Service) keys(name string) lockKeys {
	tag := "{" + name + "}"
	p := s.cfg.KeyPrefix
	return lockKeys{
		lock:    p + "lock:" + tag,
		fence:   p + "fence:" + tag,
		channel: p + "unlock:" + tag,
		waiters: p + "waiters:" + tag,
		queue:   p + "queue:" + tag,
		lost:    p + "lost:" + tag,
		name:    name,
	}
}
