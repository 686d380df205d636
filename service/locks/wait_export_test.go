package locks

import "context"

// Listen joins the lock's channel as a hold stream does, without waiting for
// the subscription. Ready is closed once Redis confirmed it; leave ends the
// listening.
func Listen(s *Service, name string) (ready <-chan struct{}, leave func()) {
	l, err := s.sub.join(s.keys(context.Background(), name).channel, true)
	if err != nil {
		panic(err)
	}
	return l.Ready(), func() { l.leave(false) }
}
