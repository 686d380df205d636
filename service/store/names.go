package store

// Character classes of names, tokens and keys. They are checked byte by byte
// (not with regexps): every request validates a name, a token or a key.

// IsAlnum reports an ASCII letter or digit.
func IsAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Matches reports whether s has minLen (at least 1) to maxLen bytes, its
// first byte in first and every other byte in rest.
func Matches(s string, minLen, maxLen int, first, rest func(byte) bool) bool {
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
