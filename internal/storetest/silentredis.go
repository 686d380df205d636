// Package storetest is for tests only: the helpers the store's and the
// domains' tests share, one home each.
package storetest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// SilentRedis returns the address of a listener on loopback that accepts
// connections and reads whatever arrives but never answers: a Redis that
// hangs, or one behind a dead network path. It closes with the test.
func SilentRedis(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
