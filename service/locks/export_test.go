package locks

import (
	"context"

	"github.com/latchkey/latchkey/service/store"
)

// AddScript registers one more script on s's store, loaded by LoadScripts
// like the built-in ones. Tests use it to prove that a script Redis rejects
// stops start-up with an error naming it.
func AddScript(s *Service, name, src string) {
	s.st.Register(store.NewScript(name, src))
}

// LoadScripts loads the scripts of s's store.
func LoadScripts(ctx context.Context, s *Service) error { return s.st.LoadScripts(ctx) }

// KeyPrefix is the key prefix of s's store.
func KeyPrefix(s *Service) string { return s.prefix }
