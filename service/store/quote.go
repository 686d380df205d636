package store

import (
	"strconv"
	"unicode/utf8"
)

// MaxQuoted is the most characters of a client's value an error message
// quotes: enough to recognise the value, never kilobytes of it.
const MaxQuoted = 64

// Quote quotes a client's value for an error message, as strconv.Quote
// does: a value of more than MaxQuoted characters is cut to its first
// MaxQuoted, followed by "…" and its length, such as
// "99999…" (5000 characters).
func Quote(s string) string {
	head, n, cut := clip(s)
	if !cut {
		return strconv.Quote(s)
	}
	return strconv.Quote(head) + "… (" + strconv.Itoa(n) + " characters)"
}

// Clip is a client's value for an error message that shows it unquoted (a
// number, a media type): a value of more than MaxQuoted characters is cut
// as Quote cuts it.
func Clip(s string) string {
	head, n, cut := clip(s)
	if !cut {
		return s
	}
	return head + "… (" + strconv.Itoa(n) + " characters)"
}

// clip returns the first MaxQuoted characters of s (a byte that is not
// UTF-8 counts as one), how many characters s has, and whether it has more.
func clip(s string) (head string, n int, cut bool) {
	if len(s) <= MaxQuoted {
		return s, utf8.RuneCountInString(s), false
	}
	n = utf8.RuneCountInString(s)
	if n <= MaxQuoted {
		return s, n, false
	}
	i, seen := 0, 0
	for i = range s {
		if seen == MaxQuoted {
			break
		}
		seen++
	}
	return s[:i], n, true
}
