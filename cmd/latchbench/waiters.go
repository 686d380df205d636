package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// runWaiters measures many concurrent waiters: it holds b.waiterNames locks,
// starts b.waiters clients that each wait for one of them (POST with wait),
// then releases the holders. Every waiter should get its lock in turn,
// release it at once, and hand it to the next.
func (b *bench) runWaiters(ctx context.Context) (Result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	holders := make([]string, b.waiterNames)
	for i := range holders {
		status, token, err := acquireOnce(ctx, client, b.base, fmt.Sprintf("wait-%d", i), `{"ttl":"60s"}`)
		if err != nil || status != http.StatusCreated {
			return Result{}, fmt.Errorf("holder %d: status %d, %v", i, status, err)
		}
		holders[i] = token
	}
	samples := make([]sample, b.waiters)
	granted := make([]time.Time, b.waiters)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range b.waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One connection per waiter, as separate clients would have.
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
			name := fmt.Sprintf("wait-%d", i%b.waiterNames)
			t0 := time.Now()
			status, token, err := acquireOnce(ctx, c, b.base, name, `{"ttl":"10s","wait":"55s"}`)
			granted[i] = time.Now()
			samples[i] = sample{latency: granted[i].Sub(t0), status: status}
			if err != nil || status != http.StatusCreated {
				return
			}
			req := newRequest(ctx, http.MethodDelete, b.base+"/v1/locks/"+name, "")
			req.Header.Set("Lock-Token", token)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(2 * time.Second) // let the waiters line up before the holders let go
	released := time.Now()
	for i, token := range holders {
		req := newRequest(ctx, http.MethodDelete, b.base+fmt.Sprintf("/v1/locks/wait-%d", i), "")
		req.Header.Set("Lock-Token", token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	wg.Wait()
	for i := range samples {
		if samples[i].status == http.StatusCreated && granted[i].After(released) {
			samples[i].latency = granted[i].Sub(released) // time to the grant once the holders let go
		}
	}
	res := summarize("waiters", samples, time.Since(start))
	res.Notes = append(res.Notes, fmt.Sprintf("%d waiters on %d locks; latencies run from the holders' release to each waiter's grant", b.waiters, b.waiterNames))
	return res, nil
}

func acquireOnce(ctx context.Context, c *http.Client, base, name, body string) (int, string, error) {
	resp, err := c.Do(newRequest(ctx, http.MethodPost, base+"/v1/locks/"+name, body))
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Lock-Token"), nil
}
