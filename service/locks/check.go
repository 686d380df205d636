package locks

// The checks of a lease request's input, for every primitive: the rules of
// names, tokens and owner texts, an acquire's TTL, wait and keep-alive
// bounds (checkAcquire, which also completes the request), and a renewal's
// or release's name, token and TTL. Each returns a *ValidationError naming
// the field and the rule.

import (
	"crypto/rand"
	"encoding/base64"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/latchkey/latchkey/service/store"
)

// Character classes of names and tokens (see store.Matches).
func isNameByte(c byte) bool  { return store.IsAlnum(c) || c == '.' || c == '_' || c == ':' || c == '-' }
func isTokenByte(c byte) bool { return store.IsAlnum(c) || c == '_' || c == '-' }

// ValidateName checks a lock name: 1–128 characters of [A-Za-z0-9._:-],
// starting with a letter or digit. Returns a *ValidationError otherwise.
func ValidateName(name string) error {
	if !store.Matches(name, 1, 128, store.IsAlnum, isNameByte) {
		return invalid("name", "format",
			"lock name must be 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit")
	}
	return nil
}

// ValidateToken checks a client-supplied lease token: 22–128 base64url
// characters. Returns a *ValidationError otherwise.
func ValidateToken(token string) error {
	if !store.Matches(token, 22, 128, isTokenByte, isTokenByte) {
		return invalid("Lock-Token", "format", "Lock-Token must be 22-128 base64url characters (A-Z a-z 0-9 - _)")
	}
	return nil
}

// MaxOwnerLen is the most characters an owner text may have.
const MaxOwnerLen = 128

// ValidateOwner checks the owner text of an acquire: at most MaxOwnerLen
// printable characters (unicode.IsPrint: letters, marks, numbers,
// punctuation, symbols and the ASCII space), valid UTF-8; empty means none.
// The text is only ever stored with the lease and shown by inspection, never
// used in a key, a metric label or a log line. Returns a *ValidationError
// otherwise, naming the first offending character by position, not by
// echoing the text.
func ValidateOwner(owner string) error {
	switch {
	case !utf8.ValidString(owner):
		return invalid("owner", "printable", "owner must be valid UTF-8 text")
	case utf8.RuneCountInString(owner) > MaxOwnerLen:
		return invalid("owner", "max", "owner must be at most %d characters", MaxOwnerLen)
	}
	n := 0
	for _, r := range owner {
		n++
		if !unicode.IsPrint(r) {
			return invalid("owner", "printable",
				"owner must be printable characters: character %d is %U, a control or non-printable character", n, r)
		}
	}
	return nil
}

// NewToken returns 128 random bits, base64url encoded (22 characters).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// checkAcquire checks name and req for an acquire of p and completes req
// with the defaults of what it leaves out: a token the service generates,
// the default TTL and max hold. The name comes first: a primitive with
// fields of its own (a mode, permits) checks the name before them, so that
// a bad name is the error named, and checkAcquire finds it valid again.
// Returns a *ValidationError naming the field and the rule.
func (s *Service) checkAcquire(p primitive, name string, req AcquireRequest) (acquisition, error) {
	if err := ValidateName(name); err != nil {
		return acquisition{}, err
	}
	a := acquisition{p: p, req: req}
	a.ownToken = req.Token == ""
	if a.ownToken {
		a.req.Token = NewToken()
	} else if err := ValidateToken(req.Token); err != nil {
		return acquisition{}, err
	}
	a.keepTTL = req.TTL == 0 // a re-entry without a ttl keeps the lease's own
	if a.keepTTL {
		a.req.TTL = s.cfg.DefaultTTL
	}
	if err := s.checkTTL("ttl", a.req.TTL); err != nil {
		return acquisition{}, err
	}
	if err := ValidateOwner(req.Owner); err != nil {
		return acquisition{}, err
	}
	switch {
	case req.Wait < 0:
		return acquisition{}, invalid("wait", "min", "wait must not be negative")
	case req.Wait > s.cfg.MaxWait:
		return acquisition{}, invalid("wait", "max", "wait must be at most %s", s.cfg.MaxWait)
	}
	if err := s.checkKeepalive(&a.req); err != nil {
		return acquisition{}, err
	}
	return a, nil
}

func (s *Service) checkTTL(field string, d time.Duration) error {
	switch {
	case d < s.cfg.MinTTL:
		return invalid(field, "min", "%s must be at least %s", field, s.cfg.MinTTL)
	case d > s.cfg.MaxTTL:
		return invalid(field, "max", "%s must be at most %s", field, s.cfg.MaxTTL)
	}
	return nil
}

// checkKeepalive validates the keep-alive fields of req and fills in the
// default max hold. Returns a *ValidationError naming the field and bound.
func (s *Service) checkKeepalive(req *AcquireRequest) error {
	if !req.Keepalive {
		switch {
		case req.MaxHold != 0:
			return invalid("max_hold", "keepalive", "max_hold bounds a keep-alive lease: send it with keepalive: true")
		case req.Heartbeat != 0:
			return invalid("heartbeat", "keepalive", "heartbeat applies to a keep-alive lease: send it with keepalive: true")
		}
		return nil
	}
	maxHoldDefault := req.MaxHold == 0
	if maxHoldDefault {
		req.MaxHold = s.cfg.DefaultMaxHold
	}
	switch {
	case req.MaxHold < s.cfg.MinTTL:
		return invalid("max_hold", "min", "max_hold must be at least %s", s.cfg.MinTTL)
	case req.MaxHold > s.cfg.MaxHoldCap:
		return invalid("max_hold", "max", "max_hold must be at most %s (the server's max hold cap)", s.cfg.MaxHoldCap)
	case req.Heartbeat < 0 || (req.Heartbeat > 0 && req.Heartbeat < s.cfg.minHeartbeat()):
		return invalid("heartbeat", "min", "heartbeat must be at least %s, the renewer's poll interval: it cannot see heartbeats closer together; got %s",
			s.cfg.minHeartbeat(), req.Heartbeat)
	case req.Heartbeat > s.cfg.MaxHoldCap:
		return invalid("heartbeat", "max", "heartbeat must be at most %s (the server's max hold cap)", s.cfg.MaxHoldCap)
	}
	return s.cfg.checkKeepaliveBounds(req.TTL, req.MaxHold, maxHoldDefault)
}

// minHeartbeat is the shortest heartbeat a keep-alive lease may ask for:
// RenewPoll (at least MinTTL). The renewer looks at the registry at most
// every RenewPoll, and checks a lease's last heartbeat only then; a
// heartbeat shorter than that is a deadline it cannot see, one a holder
// could only meet by chance.
func (c Config) minHeartbeat() time.Duration { return max(c.RenewPoll, c.MinTTL) }

// checkKeepaliveBounds refuses keep-alive settings the service cannot
// honour: a TTL the renewer cannot renew in time, or a max hold shorter
// than the TTL (the lease would end before its TTL says). maxHoldDefault
// says maxHold is the server's default, not the request's.
func (c Config) checkKeepaliveBounds(ttl, maxHold time.Duration, maxHoldDefault bool) error {
	switch {
	case ttl < c.MinKeepaliveTTL:
		return invalid("ttl", "min", "ttl of a keep-alive lease must be at least %s, so the service can renew it (every ttl/3) before it expires; got %s",
			c.MinKeepaliveTTL, ttl)
	case maxHold < ttl && maxHoldDefault:
		return invalid("max_hold", "min", "max_hold must be at least the ttl (%s): the server's default max_hold is %s, send a longer max_hold or a shorter ttl",
			ttl, maxHold)
	case maxHold < ttl:
		return invalid("max_hold", "min", "max_hold must be at least the ttl (%s), got %s: the lease would end before its ttl", ttl, maxHold)
	}
	return nil
}

// checkNameToken checks the name and token of a renew or release. Returns a
// *ValidationError.
func checkNameToken(name, token string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	return ValidateToken(token)
}

// checkNameOptionalToken checks the name and, when one is given, the token
// of an inspect. Returns a *ValidationError.
func checkNameOptionalToken(name, token string) error {
	if token == "" {
		return ValidateName(name)
	}
	return checkNameToken(name, token)
}

// checkRenew checks the name, token and ttl of a renewal. Returns a
// *ValidationError.
func (s *Service) checkRenew(name, token string, ttl time.Duration) error {
	if err := checkNameToken(name, token); err != nil {
		return err
	}
	return s.checkRenewTTL(ttl)
}

// checkRenewTTL checks the ttl a renewal asks for; 0 asks for the lease's
// own. Returns a *ValidationError.
func (s *Service) checkRenewTTL(ttl time.Duration) error {
	if ttl == 0 {
		return nil
	}
	return s.checkTTL("ttl", ttl)
}
