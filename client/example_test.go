package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/latchkey/latchkey/client"
)

// store stands for the resource the lock protects: it accepts a write only
// with a fence at least as high as the highest it has seen.
type store struct{ highest int64 }

func (s *store) write(fence int64, v string) error {
	if fence < s.highest {
		return fmt.Errorf("fence %d is stale (seen %d): the lease has passed to another holder", fence, s.highest)
	}
	s.highest = fence
	_ = v
	return nil
}

// Take a lock, write with its fence while it is valid, release it.
func Example() {
	url, stop := exampleServer() // a Latchkey server, e.g. "http://127.0.0.1:8080"
	defer stop()

	ctx := context.Background()
	c, err := client.New(url, client.WithAPIKey("secret"))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := c.Lock(ctx, "invoices", client.LockOptions{TTL: 30 * time.Second, Wait: time.Minute})
	var held *client.HeldError
	if errors.As(err, &held) {
		log.Printf("busy; try again in %s", held.RetryAfter)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired", lease.Name)

	var db store
	// Work only while the lease is valid, and let the store check the fence.
	if time.Now().Before(lease.ValidUntil()) {
		if err := db.write(lease.Fence, "run 42"); err != nil {
			log.Fatal(err)
		}
		fmt.Println("written with a fence > 0:", lease.Fence > 0)
	}
	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", errors.Is(lease.Err(), client.ErrReleased))
	// Output:
	// acquired invoices
	// written with a fence > 0: true
	// released: true
}

// A lease the server keeps alive for as long as this process sends
// heartbeats: Done tells the work to stop when the lease is lost.
func ExampleClient_Lock_keepAlive() {
	url, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, _ := client.New(url)
	lease, err := c.Lock(ctx, "reindex", client.LockOptions{
		TTL: 15 * time.Second, KeepAlive: true, Heartbeat: 10 * time.Second, MaxHold: time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	batches := 0
	for ; batches < 100; batches++ {
		select {
		case <-lease.Done():
			log.Printf("stopping: %v", lease.Err())
			return
		default:
		}
		// ... one batch of work, written with lease.Fence ...
	}
	fmt.Println("reindexed", batches, "batches")
	// Output: reindexed 100 batches
}

// A lease held for as long as a connection stays open.
func ExampleClient_Hold() {
	url, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, _ := client.New(url)
	lease, err := c.Hold(ctx, "leader", client.HoldOptions{TTL: 10 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leading:", lease.Fence > 0)
	// ... lead, and stop as soon as lease.Done() is closed: the lease is
	// lost then (force-released, the server gone) and lease.Err() says why.

	if err := lease.Unlock(ctx); err != nil { // step down
		log.Fatal(err)
	}
	<-lease.Done()
	fmt.Println("stepped down:", errors.Is(lease.Err(), client.ErrReleased))
	// Output:
	// leading: true
	// stepped down: true
}

// Wait until a rate limit allows a call, for at most 5 seconds.
func ExampleLimiter_Wait() {
	url, stop := exampleServer() // with a policy "per-user" of 10 calls a minute
	defer stop()

	c, _ := client.New(url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := c.Limiter().Wait(ctx, "per-user", "user-17", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("allowed:", d.Allowed, "remaining:", d.Remaining)
	// Output: allowed: true remaining: 9
}

// Readers share a read/write lock; a writer gets it once they are gone.
func ExampleRWLock() {
	url, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, _ := client.New(url)
	catalog := c.RWLock("catalog")
	r1, err := catalog.RLock(ctx, client.LockOptions{TTL: 30 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	r2, err := catalog.RLock(ctx, client.LockOptions{TTL: 30 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers, each with a fence of its own:", r2.Fence > r1.Fence)

	_, err = catalog.TryLock(ctx, client.LockOptions{})
	fmt.Println("writer refused while they read:", errors.Is(err, client.ErrHeld))

	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	w, err := catalog.Lock(ctx, client.LockOptions{TTL: 30 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writing with a fence above the readers':", w.Fence > r2.Fence)
	_ = w.Unlock(ctx)
	// Output:
	// two readers, each with a fence of its own: true
	// writer refused while they read: true
	// writing with a fence above the readers': true
}

// A writer lets readers in without letting another writer in first.
func ExampleRWLock_Downgrade() {
	url, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, _ := client.New(url)
	catalog := c.RWLock("catalog")
	w, err := catalog.Lock(ctx, client.LockOptions{TTL: 30 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	// ... write the catalog with w.Fence ...
	r, err := catalog.Downgrade(ctx, w, client.LockOptions{TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	_ = w.Unlock(ctx) // readers may come in now; r still reads what w wrote
	other, err := catalog.TryRLock(ctx, client.LockOptions{TTL: 30 * time.Second})
	fmt.Println("another reader joins:", err == nil)
	_ = other.Unlock(ctx)
	_ = r.Unlock(ctx)
	// Output: another reader joins: true
}

// At most 3 uploads at once: a big one takes 2 permits.
func ExampleSemaphore() {
	url, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, _ := client.New(url)
	uploads := c.Semaphore("uploads", 3)
	big, err := uploads.Acquire(ctx, 2, client.LockOptions{TTL: 30 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	small, err := uploads.TryAcquire(ctx, 1, client.LockOptions{TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	_, err = uploads.TryAcquire(ctx, 1, client.LockOptions{})
	var held *client.HeldError
	fmt.Println("no permit left:", errors.As(err, &held))

	st, err := uploads.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in use:", st.InUse, "of", st.Permits, "by", st.Holders, "leases")

	_, err = c.Semaphore("uploads", 5).TryAcquire(ctx, 1, client.LockOptions{})
	var mismatch *client.PermitsMismatchError
	if errors.As(err, &mismatch) {
		fmt.Println("the semaphore has", mismatch.Permits, "permits")
	}
	_ = big.Unlock(ctx) // gives both permits back
	_ = small.Unlock(ctx)
	// Output:
	// no permit left: true
	// in use: 3 of 3 by 2 leases
	// the semaphore has 3 permits
}

// Two candidates for one election: the first leads, the second waits in
// line and leads with a greater term once the first resigns; anyone can ask
// who leads.
func ExampleElection() {
	url, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, _ := client.New(url)
	el := c.Election("db-primary")
	first, err := el.Campaign(ctx, "10.0.0.7:5432", client.CampaignOptions{TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	_, err = el.TryCampaign(ctx, "10.0.0.8:5432", client.CampaignOptions{})
	var held *client.HeldError
	if errors.As(err, &held) {
		fmt.Println("leading:", held.Leader.Value)
	}
	if err := el.Proclaim(ctx, first, "10.0.0.9:5432"); err != nil {
		log.Fatal(err)
	}
	leader, err := el.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("proclaimed:", leader.Value, "same term:", leader.Term == first.Fence)

	next := make(chan *client.Lease)
	go func() {
		l, err := el.Campaign(ctx, "10.0.0.8:5432", client.CampaignOptions{TTL: 30 * time.Second, Wait: time.Minute})
		if err != nil {
			log.Fatal(err)
		}
		next <- l
	}()
	for st, _ := el.Status(ctx); st.Candidates == 0; st, _ = el.Status(ctx) {
		time.Sleep(10 * time.Millisecond) // until the second candidate waits
	}
	_ = el.Resign(ctx, first)
	second := <-next
	fmt.Println("elected on resignation with a greater term:", second.Fence > first.Fence)
	_ = el.Resign(ctx, second)
	leader, _ = el.Leader(ctx)
	fmt.Println("vacant:", leader == nil)
	// Output:
	// leading: 10.0.0.7:5432
	// proclaimed: 10.0.0.9:5432 same term: true
	// elected on resignation with a greater term: true
	// vacant: true
}
