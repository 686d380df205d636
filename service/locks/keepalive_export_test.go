package locks

import (
	"context"
	"time"
)

// RenewDueNow runs the renewer once: every due keep-alive lease is renewed
// (or found lost) before it returns, unless a call fails. It returns how long
// the renewer would sleep before looking again. Tests drive time with
// miniredis.
func RenewDueNow(ctx context.Context, s *Service) time.Duration { return s.renewDue(ctx) }
