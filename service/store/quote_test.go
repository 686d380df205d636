package store_test

import (
	"strings"
	"testing"

	"github.com/latchkey/latchkey/service/store"
)

// TestQuote: an error message quotes a short value whole and a long one by
// its first 64 characters and its length, whatever its bytes.
func TestQuote(t *testing.T) {
	tests := []struct {
		desc, in, quote, clip string
	}{
		{"empty", "", `""`, ""},
		{"short", "soon", `"soon"`, "soon"},
		{"64 characters", strings.Repeat("9", 64), `"` + strings.Repeat("9", 64) + `"`, strings.Repeat("9", 64)},
		{"65 characters", strings.Repeat("9", 65), `"` + strings.Repeat("9", 64) + `"… (65 characters)`, strings.Repeat("9", 64) + "… (65 characters)"},
		{"5,000 digits", strings.Repeat("9", 4999) + "s", `"` + strings.Repeat("9", 64) + `"… (5000 characters)`, strings.Repeat("9", 64) + "… (5000 characters)"},
		{"multi-byte characters, cut between characters", strings.Repeat("é", 100), `"` + strings.Repeat("é", 64) + `"… (100 characters)`, strings.Repeat("é", 64) + "… (100 characters)"},
		{"40 two-byte characters are not cut", strings.Repeat("é", 40), `"` + strings.Repeat("é", 40) + `"`, strings.Repeat("é", 40)},
		{"bytes that are not UTF-8", strings.Repeat("\xff", 70), `"` + strings.Repeat(`\xff`, 64) + `"… (70 characters)`, strings.Repeat("\xff", 64) + "… (70 characters)"},
		{"quotes and newlines are escaped", "a\"b\nc", `"a\"b\nc"`, "a\"b\nc"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := store.Quote(tt.in); got != tt.quote {
				t.Errorf("Quote = %s, want %s", got, tt.quote)
			}
			if got := store.Clip(tt.in); got != tt.clip {
				t.Errorf("Clip = %q, want %q", got, tt.clip)
			}
		})
	}
}
