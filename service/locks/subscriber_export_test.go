package locks

import "context"

// ListenHints joins the lock's channel as a hold stream does, and returns
// the hints it receives: Ready is closed once Redis confirmed the
// subscription; leave ends the listening.
func ListenHints(s *Service, name string) (ready <-chan struct{}, hints <-chan string, leave func()) {
	l, err := s.sub.join(s.keys(context.Background(), name).channel, true)
	if err != nil {
		panic(err)
	}
	return l.Ready(), l.C(), func() { l.leave(false) }
}

// Channel names the wake-up channel of the exclusive lock name.
func Channel(s *Service, name string) string { return s.keys(context.Background(), name).channel }
