package auth

import "strings"

// MaxSecretLen bounds a bearer secret; a longer header is refused unread.
const MaxSecretLen = 512

// ParseBearer returns the secret of an Authorization header value of the
// form "Bearer <secret>" (the scheme in any case, RFC 9110 §11.1; one or
// more spaces after it), where the secret is an RFC 6750 b64token: 1 to
// MaxSecretLen characters of A-Z a-z 0-9 - . _ ~ + / followed by any '='.
// It reports false for anything else, so a secret never holds a space, a
// control character or a byte that could break a log line.
func ParseBearer(header string) (string, bool) {
	scheme, rest, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret := strings.TrimLeft(rest, " ")
	if secret == "" || len(secret) > MaxSecretLen {
		return "", false
	}
	i := 0
	for i < len(secret) && isB64TokenByte(secret[i]) {
		i++
	}
	if i == 0 {
		return "", false
	}
	for j := i; j < len(secret); j++ {
		if secret[j] != '=' {
			return "", false
		}
	}
	return secret, true
}

func isB64TokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
}
