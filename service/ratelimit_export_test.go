package service

// DenyCacheLen reports how many denials s holds in its in-process cache.
func DenyCacheLen(s *Service) int { return s.rl.cache.len() }
