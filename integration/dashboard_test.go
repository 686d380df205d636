package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// envUpdateScreenshot, set to 1, makes TestDashboard write its screenshot
// to docs/dashboard.png, the one the README shows.
const envUpdateScreenshot = "LATCHKEY_UPDATE_SCREENSHOT"

// TestDashboard drives /ui/ in a real headless Chromium against a server
// with API keys on. The page is served without a key and shows nothing
// until one is typed; then a lock taken through the API appears with its
// owner and goes when it is released; a lock force-released from the page,
// with the keyboard and the admin key typed in its dialog, is free in
// Redis and listed as force-released; a key denied by a policy appears
// among the policy's most-denied keys; and on a phone's width nothing is
// wider than the screen. Any JavaScript error, console error or failed
// request fails the test, but for the 401s of the page asking without a
// key.
func TestDashboard(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))),
		withPolicies(policy("per-client", ratelimit.FixedWindow, 2, time.Hour)))
	a := bearer(secretA)
	b := newBrowser(t)
	expected401 := b.allow(http.StatusUnauthorized, "/v1/")

	b.do(t, "open the page", chromedp.Navigate(e.URL+"/ui"))
	b.waitFor(t, "the page to ask for a key", `document.getElementById("status").textContent.includes("needs an API key")`)
	b.waitFor(t, "nothing shown without a key", `document.getElementById("content").hidden && !document.querySelector("#held-rows tr")`)
	if got := b.eval(t, `location.pathname`); got != "/ui/" {
		t.Errorf("/ui led to %s, want /ui/", got)
	}
	expected401()

	b.do(t, "type the API key", chromedp.SendKeys(chromedp.ID("api-key"), secretA+"\r"))
	b.waitFor(t, "the page to show what is held", `!document.getElementById("content").hidden`)

	held := e.acquire(t, "orders-42", `{"ttl":"5m","owner":"worker-7"}`, a...)
	b.waitFor(t, "orders-42 listed with its owner", `document.querySelector('tr[data-name="orders-42"] .owner')?.textContent === "worker-7"`)
	e.release(t, "orders-42", held.Token, a...)
	b.waitFor(t, "orders-42 gone", `!document.querySelector('tr[data-name="orders-42"]')`)
	b.waitFor(t, "orders-42 listed as ended", `document.querySelector('#lost li[data-name="orders-42"] .reason')?.textContent.startsWith("released")`)

	e.acquire(t, "invoices-7", `{"ttl":"5m","owner":"batch-9"}`, a...)
	b.waitFor(t, "invoices-7 listed", `!!document.querySelector('tr[data-name="invoices-7"] button')`)
	b.do(t, "force-release invoices-7 with the keyboard",
		chromedp.Focus(chromedp.CSS(`tr[data-name="invoices-7"] button`)),
		chromedp.KeyEvent("\r"))
	b.waitFor(t, "the dialog to ask for the admin key", `document.getElementById("force-dialog").open && document.activeElement.id === "admin-key"`)
	b.do(t, "type the admin key", chromedp.SendKeys(chromedp.ID("admin-key"), secretAdminA+"\r"))
	b.waitFor(t, "invoices-7 gone", `!document.getElementById("force-dialog").open && !document.querySelector('tr[data-name="invoices-7"]')`)
	if s := e.inspect(t, "invoices-7", a...); s.Held {
		t.Errorf("invoices-7 after the page's force release: %v, want free", s)
	}
	b.waitFor(t, "invoices-7 listed as force-released", `document.querySelector('#lost li[data-name="invoices-7"] .reason')?.textContent === "force-released from this page"`)
	if n := b.eval(t, `String(document.querySelectorAll('#lost li[data-name="invoices-7"]').length)`); n != "1" {
		t.Errorf("invoices-7 listed %s times among the lost, want once (the page's and the API's record are one)", n)
	}

	// A loss the page never saw held: recorded by the scripts, listed
	// by the API, shown with its reason and owner.
	ledger := e.acquire(t, "ledger-3", `{"ttl":"5m","owner":"reconciler-1"}`, a...)
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/ledger-3?force=true", "", bearer(secretAdminA)...), http.StatusNoContent)
	b.waitFor(t, "ledger-3 listed as force-released by reconciler-1",
		`document.querySelector('#lost li[data-name="ledger-3"] .reason')?.textContent === "force-released" &&
		document.querySelector('#lost li[data-name="ledger-3"]').textContent.includes("held by reconciler-1 (fence `+strconv.FormatInt(ledger.Fence, 10)+`)")`)

	for i, want := range []int{200, 200, 429, 429} {
		r := e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"per-client","key":"203.0.113.7"}`, a...)
		if r.Status != want {
			t.Fatalf("check %d of 203.0.113.7: %d, want %d", i+1, r.Status, want)
		}
	}
	b.waitFor(t, "203.0.113.7 among per-client's most denied", `document.querySelector('[data-policy="per-client"] li[data-key="203.0.113.7"]')?.textContent.includes("2 denials")`)

	// What the screenshot shows: a lease of each kind, one waited for.
	e.acquire(t, "billing:nightly-export", `{"ttl":"10m","owner":"export-runner@db-3","keepalive":true}`, a...)
	e.acquire(t, "orders-42", `{"ttl":"2m","owner":"worker-7"}`, a...)
	wantStatus(t, e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"write","ttl":"90s","owner":"catalog-sync"}`, a...), http.StatusCreated)
	wantStatus(t, e.do(t, "POST", "/v1/semaphores/gpu-pool", `{"permits":4,"count":2,"ttl":"3m","owner":"trainer-2"}`, a...), http.StatusCreated)
	wantStatus(t, e.do(t, "POST", "/v1/semaphores/gpu-pool", `{"permits":4,"count":1,"ttl":"3m","owner":"trainer-5"}`, a...), http.StatusCreated)
	b.waitFor(t, "five leases listed, one row per semaphore holder", `document.querySelectorAll("#held-rows tr[data-name]").length === 5`)
	b.waitFor(t, "each semaphore holder and the writer listed with its owner",
		`["trainer-2", "trainer-5"].every((o) => [...document.querySelectorAll('tr[data-name="gpu-pool"] .owner')].some((td) => td.textContent === o)) &&
		document.querySelector('tr[data-name="catalog"] .owner')?.textContent === "catalog-sync"`)
	b.screenshot(t)

	b.do(t, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.waitFor(t, "the page to fit a phone's width", `document.documentElement.scrollWidth <= window.innerWidth`)
	b.wantNoProblems(t)
}

// TestDashboardBehindNginx serves the dashboard through a real nginx at
// the path prefix /latchkey/, as the README shows: every request the page
// makes stays under the prefix, and a lock taken through the API appears.
func TestDashboardBehindNginx(t *testing.T) {
	nginx := lookNginx(t)
	e := newTestEnv(t)
	listen := closedPort(t)
	front := runNginx(t, nginx, `events {}
http {
    server {
        listen `+listen+`;
        location /latchkey/ {
            proxy_pass http://`+hostPort(t, e.URL)+`/;
        }
    }
}
`, listen)
	b := newBrowser(t)
	b.do(t, "open the page", chromedp.Navigate(front+"/latchkey/ui"))
	b.waitFor(t, "the page to show what is held", `!document.getElementById("content").hidden && document.getElementById("held-rows").textContent.includes("Nothing is held")`)
	e.acquire(t, "orders-42", `{"ttl":"1m","owner":"worker-7"}`)
	b.waitFor(t, "orders-42 listed with its owner", `document.querySelector('tr[data-name="orders-42"] .owner')?.textContent === "worker-7"`)
	if got := b.eval(t, `location.pathname`); got != "/latchkey/ui/" {
		t.Errorf("/latchkey/ui led to %s, want /latchkey/ui/", got)
	}
	b.wantNoProblems(t)
	b.wantAllUnder(t, front+"/latchkey/")
}

// browser is one headless Chromium tab, with what it saw go wrong.
type browser struct {
	ctx context.Context

	mu        sync.Mutex
	allowed   map[string]bool     // "status path" a test causes on purpose, while it does
	expected  map[string]bool     // requests answered with an allowed status
	responses []string            // every URL answered
	failures  []string            // unexpected statuses and failed loads, by request
	requestOf map[string][]string // the failures of each request, to forgive expected ones
	errors    []string            // exceptions and console errors
}

// newBrowser starts a headless Chromium for t (skipping t, or failing it
// when the environment requires every tool, without one) and records the
// page's exceptions, console errors, failed loads and error statuses.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		skipOrFail(t, "chromium is not installed (Debian: apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // its sandbox refuses to run as root, as CI does
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx, allowed: map[string]bool{}, expected: map[string]bool{}, requestOf: map[string][]string{}}
	// Listen starts the browser, its life bound to ctx (not to a deadline).
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// record notes an event of the page; it runs on the browser's reading
// goroutine, so it only appends.
func (b *browser) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.errors = append(b.errors, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			b.errors = append(b.errors, "console."+string(ev.Type)+" called")
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError {
			id := string(ev.Entry.NetworkRequestID)
			msg := "console error (" + string(ev.Entry.Source) + "): " + ev.Entry.Text + " " + ev.Entry.URL
			if id != "" {
				b.requestOf[id] = append(b.requestOf[id], msg)
			} else {
				b.errors = append(b.errors, msg)
			}
		}
	case *network.EventLoadingFailed:
		id := string(ev.RequestID)
		b.requestOf[id] = append(b.requestOf[id], "request failed: "+ev.ErrorText+" "+string(ev.BlockedReason))
	case *network.EventResponseReceived:
		id, u, status := string(ev.RequestID), ev.Response.URL, ev.Response.Status
		b.responses = append(b.responses, u)
		if status < 400 {
			return
		}
		for k := range b.allowed {
			s, path, _ := strings.Cut(k, " ")
			if s == strconv.FormatInt(status, 10) && strings.Contains(u, path) {
				b.expected[id] = true
				return
			}
		}
		b.requestOf[id] = append(b.requestOf[id], fmt.Sprintf("%d from %s", status, u))
	}
}

// allow forgives answers of status to URLs containing path until the
// returned function is called.
func (b *browser) allow(status int, path string) (stop func()) {
	k := strconv.Itoa(status) + " " + path
	b.mu.Lock()
	b.allowed[k] = true
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.allowed, k)
		b.mu.Unlock()
	}
}

// problems are what went wrong in the page, but for the requests answered
// with an allowed status (and the console errors about them).
func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := append([]string(nil), b.errors...)
	for id, msgs := range b.requestOf {
		if !b.expected[id] {
			ps = append(ps, msgs...)
		}
	}
	return ps
}

func (b *browser) wantNoProblems(t *testing.T) {
	t.Helper()
	for _, p := range b.problems() {
		t.Errorf("in the page: %s", p)
	}
}

// wantAllUnder fails t unless every URL the page loaded starts with base.
func (b *browser) wantAllUnder(t *testing.T, base string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.responses) == 0 {
		t.Fatal("the page loaded nothing")
	}
	for _, u := range b.responses {
		if !strings.HasPrefix(u, base) {
			t.Errorf("the page loaded %s, outside %s", u, base)
		}
	}
}

// do runs actions in the page, failing t with what after a generous
// deadline.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v (page status: %q; problems: %v)", what, err, b.status(), b.problems())
	}
}

// waitFor waits until the JavaScript condition holds in the page: the DOM
// state the page reaches by itself, refresh after refresh.
func (b *browser) waitFor(t *testing.T, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for %s: %v (page status: %q; problems: %v)", what, err, b.status(), b.problems())
	}
}

// eval answers a JavaScript expression's string value in the page.
func (b *browser) eval(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// status is the page's status line, for failure messages.
func (b *browser) status() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status")?.textContent ?? ""`))
	return v
}

// screenshot keeps the page's picture as an artefact of t and, when the
// environment asks for it, as docs/dashboard.png.
func (b *browser) screenshot(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	b.eval(t, `(document.activeElement?.blur(), "")`) // no focus ring in the picture
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if envTrue(envUpdateScreenshot) {
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
