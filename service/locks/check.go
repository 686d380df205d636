package locks

import "time"

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
