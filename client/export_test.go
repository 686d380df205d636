package client

import "context"

// LockWithToken asks for the write lease with token, as no exported call
// does: the client's tokens are fresh for each acquire. It lets a test show
// the server's answer to the token of a read lease asking for write.
func (rw *RWLock) LockWithToken(ctx context.Context, token string, opts LockOptions) (*Lease, error) {
	return rw.c.lock(ctx, rw.target(modeWrite), token, opts)
}
