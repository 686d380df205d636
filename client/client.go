// Package client is the Go client of Latchkey: lock leases that notice when
// they are lost, with the fence to check where the work is written, and
// rate-limit decisions. Leases are taken on locks ([Client.Lock]), on
// read/write locks ([Client.RWLock]: many readers or one writer) and on
// semaphores ([Client.Semaphore]: N permits); each is a [Lease].
//
// A lease is valid until [Lease.ValidUntil], measured on the caller's own
// monotonic clock from when the acquire request was sent; [Lease.Done] is
// closed when the lease is lost or ends and [Lease.Err] says why. Keep a
// lease alive either with the server's keep-alive (LockOptions.KeepAlive,
// with heartbeats this client sends) or for as long as a connection stays
// open ([Client.Hold]).
//
// The client only speaks HTTP: it shares nothing with the server but the
// wire format documented in api/openapi.yaml.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultURL is the server address used when none is given.
const DefaultURL = "http://127.0.0.1:8080"

// Retry says how often and how long a request is tried again after a 503 or
// a connection error. Only requests whose retry is safe are retried:
// inspection, renewal, and acquire and release with the lease's own token
// (settled so that a hold count never drifts); a rate-limit check or a
// force-release is retried only when the connection could not be made at
// all. Zero values fall back to the defaults.
type Retry struct {
	// Attempts is how many times a request is sent at most, the first one
	// included. Default 3; 1 disables retries.
	Attempts int
	// MinBackoff is the smallest pause before a retry. Default 100ms.
	MinBackoff time.Duration
	// MaxBackoff bounds the pause before a retry, which doubles after each
	// attempt and is drawn at random below that bound (full jitter).
	// Default 2s.
	MaxBackoff time.Duration
}

// Defaults of Retry.
const (
	DefaultRetryAttempts   = 3
	DefaultRetryMinBackoff = 100 * time.Millisecond
	DefaultRetryMaxBackoff = 2 * time.Second
)

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = DefaultRetryAttempts
	}
	if r.MinBackoff <= 0 {
		r.MinBackoff = DefaultRetryMinBackoff
	}
	if r.MaxBackoff < r.MinBackoff {
		r.MaxBackoff = max(DefaultRetryMaxBackoff, r.MinBackoff)
	}
	return r
}

// backoff is the pause before retry number n (1 for the first retry):
// uniformly random in [MinBackoff, min(MaxBackoff, MinBackoff·2^(n-1))].
func (r Retry) backoff(n int) time.Duration {
	ceiling := r.MinBackoff << min(n-1, 20)
	if ceiling > r.MaxBackoff || ceiling <= 0 {
		ceiling = r.MaxBackoff
	}
	return r.MinBackoff + rand.N(ceiling-r.MinBackoff+1)
}

// Client talks to one Latchkey server. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	hc     *http.Client
	apiKey string
	retry  Retry
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends key as "Authorization: Bearer <key>" on every request.
// Force-release needs a key with the admin right (or the server's
// LATCHKEY_ADMIN_KEY).
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithHTTPClient sends requests with hc instead of a client of its own. Do
// not give hc a Timeout shorter than the longest wait or hold: bound each
// call with its context instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetry sets the retry policy (see Retry).
func WithRetry(r Retry) Option { return func(c *Client) { c.retry = r } }

// New returns a client of the server at baseURL (such as
// "http://127.0.0.1:8080"; empty means DefaultURL). Returns an error if
// baseURL is not an http or https URL.
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: server URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q: want http://host:port or https://host:port", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, hc: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	c.retry = c.retry.withDefaults()
	return c, nil
}

// request is one API call.
type request struct {
	method string
	path   string // under the base URL, already escaped
	query  url.Values
	body   any // JSON-encoded when non-nil
	token  string
	// lastEventID is the Last-Event-ID header of a watch's reconnect.
	lastEventID string
}

// response is a finished API call.
type response struct {
	status int
	header http.Header
	body   []byte
	sent   time.Time     // when the request was sent (monotonic)
	stream io.ReadCloser // the open body of a 200 answer to a hold
}

// errUnsent marks a failure before any byte of the request could have
// reached the server (the connection was refused): always safe to retry.
var errUnsent = errors.New("request not sent")

// newHTTPRequest builds req as an *http.Request.
func (c *Client) newHTTPRequest(ctx context.Context, req request) (*http.Request, error) {
	u := c.base.String() + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	var body io.Reader
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, err
	}
	if req.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	hr.Header.Set("Accept", "application/json, application/problem+json")
	if c.apiKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if req.token != "" {
		hr.Header.Set("Lock-Token", req.token)
	}
	if req.lastEventID != "" {
		hr.Header.Set("Last-Event-ID", req.lastEventID)
	}
	return hr, nil
}

// send makes one attempt of req and reads the whole answer. A transport
// error is returned wrapped in ErrUnavailable (and errUnsent when the
// connection could not be made); the caller's own cancellation is returned
// as is.
func (c *Client) send(ctx context.Context, req request) (response, error) {
	return c.sendMaybeStream(ctx, req, false)
}

// sendMaybeStream is send; with stream, a 200 answer's body is left open in
// response.stream for the caller to read and close.
func (c *Client) sendMaybeStream(ctx context.Context, req request, stream bool) (response, error) {
	hr, err := c.newHTTPRequest(ctx, req)
	if err != nil {
		return response{}, err
	}
	sent := time.Now()
	resp, err := c.hc.Do(hr)
	if err != nil {
		return response{sent: sent}, transportError(ctx, req, err)
	}
	if stream && resp.StatusCode == http.StatusOK {
		return response{status: resp.StatusCode, header: resp.Header, sent: sent, stream: resp.Body}, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return response{sent: sent}, transportError(ctx, req, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b, sent: sent}, nil
}

func transportError(ctx context.Context, req request, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s %s: %w", req.method, req.path, context.Cause(ctx))
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%s %s: %w: %w: %w", req.method, req.path, ErrUnavailable, errUnsent, err)
	}
	return fmt.Errorf("%s %s: %w: %w", req.method, req.path, ErrUnavailable, err)
}

// retryable says whether a failed attempt may be tried again: a 503, or a
// transport error when idempotent, or a connection never made.
func retryable(resp response, err error, idempotent bool) bool {
	switch {
	case err != nil:
		return errors.Is(err, errUnsent) || (idempotent && errors.Is(err, ErrUnavailable))
	case resp.status == http.StatusServiceUnavailable:
		return idempotent
	}
	return false
}

// do sends req, retrying per the policy when idempotent (or when the
// connection could not be made), and returns the answer. Any non-2xx answer
// is returned as an error (see errorOf); the response is still returned.
func (c *Client) do(ctx context.Context, req request, idempotent bool) (response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := c.send(ctx, req)
		if err == nil && resp.status >= 300 {
			err = errorOf(req, resp)
		}
		if err == nil || attempt >= c.retry.Attempts || !retryable(resp, err, idempotent) {
			return resp, err
		}
		if werr := c.pause(ctx, attempt, resp); werr != nil {
			return resp, errors.Join(err, werr)
		}
	}
}

// pause sleeps before retry number attempt, at least as long as the
// answer's Retry-After asks (when it asks at most MaxBackoff), bounded by ctx.
func (c *Client) pause(ctx context.Context, attempt int, resp response) error {
	d := c.retry.backoff(attempt)
	if ra := retryAfter(resp.header); ra > d && ra <= c.retry.MaxBackoff {
		d = ra
	}
	return sleep(ctx, d)
}

// sleep waits for d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// decode unmarshals a JSON answer into v.
func decode(req request, resp response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("%s %s: answer is not the JSON expected (status %d): %w", req.method, req.path, resp.status, err)
	}
	return nil
}

func lockPath(name string) string { return "/v1/locks/" + url.PathEscape(name) }
