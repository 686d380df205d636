package grpcapi_test

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The two configurations the reload test swaps: tier "free" is limited to
// one request per year per user in the second only.
const (
	openConfig = `domain: gw
descriptors:
  - {key: tier, value: free, rate_limit: {unlimited: true}}
  - {key: load, rate_limit: {unlimited: true}}
`
	limitedConfig = `domain: gw
descriptors:
  - key: tier
    value: free
    descriptors:
      - {key: user, rate_limit: {unit: year, requests_per_unit: 1}}
  - {key: load, rate_limit: {unlimited: true}}
`
)

// TestReloadUnderLoad: while 16 clients call ShouldRateLimit without a
// pause, the configuration file is replaced (written beside it, then
// renamed over it, as an operator's tool does) and reloaded 20 times: no
// call fails, and right after each reload the decisions are the new
// configuration's.
func TestReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	swap := func(body string) {
		tmp := filepath.Join(dir, "gw.yaml.new")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	swap(openConfig)
	e := newEnv(t, nil, options{reload: path})

	stop, running := make(chan struct{}), make(chan struct{}, 16)
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			req := &pb.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{desc("load", "x"), desc("tier", "free", "user", "loader")}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.ask(t, "", req); err != nil {
					failed.Add(1)
					t.Errorf("ShouldRateLimit during the reloads: %v", err)
					return
				}
				if calls.Add(1) <= 16 {
					running <- struct{}{}
				}
			}
		})
	}
	for range 16 { // the load is on before the first reload
		select {
		case <-running:
		case <-t.Context().Done():
		}
	}
	for i := range 20 {
		user := "u" + strconv.Itoa(i)
		req := &pb.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{desc("tier", "free", "user", user)}}
		body, want := openConfig, []pb.RateLimitResponse_Code{ok, ok}
		if i%2 == 0 {
			body, want = limitedConfig, []pb.RateLimitResponse_Code{ok, over}
		}
		swap(body)
		if err := e.reloader.Reload(); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		got := []pb.RateLimitResponse_Code{e.must(t, req).OverallCode, e.must(t, req).OverallCode}
		if !equalCodes(got, want) {
			t.Errorf("reload %d: %s's two calls %v, want %v", i, user, got, want)
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || calls.Load() == 0 {
		t.Errorf("%d calls failed of %d", failed.Load(), calls.Load())
	}
}
