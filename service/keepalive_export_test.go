package service

import "context"

// RenewDueNow runs the renewer once: every due keep-alive lease is renewed
// (or found lost) before it returns. Tests drive time with miniredis.
func RenewDueNow(ctx context.Context, s *Service) { s.renewDue(ctx) }
