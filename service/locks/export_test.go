package locks

import (
	"context"
)

// LoadScripts loads the scripts of s's store.
func LoadScripts(ctx context.Context, s *Service) error { return s.st.LoadScripts(ctx) }

// KeyPrefix is the key prefix of s's store.
func KeyPrefix(s *Service) string { return s.prefix }
