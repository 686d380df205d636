package integration

// The harness's client of hold streams (POST /v1/locks/{name}/hold):
// Server-Sent Events read in the background, each checked against its schema.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/latchkey/latchkey/api"
)

// sseEvent is one Server-Sent Event, or a comment line when Comment is set.
type sseEvent struct {
	Name    string
	Data    map[string]any
	Comment string
}

// holdStream is an open POST /v1/locks/{name}/hold.
type holdStream struct {
	Status int
	Header http.Header
	Body   string // the problem body when Status is not 200
	Events chan sseEvent
	// schemas names the schema of each event's data (holdEventSchemas, or
	// electionHoldEventSchemas on an election's hold).
	schemas map[string]string
	cancel  context.CancelFunc
	done    chan struct{}
}

// openHold starts a hold of name with body. The stream is read in the
// background into Events until close or the end of the stream.
func (e *testEnv) openHold(t testing.TB, name, body string, headerPairs ...string) *holdStream {
	t.Helper()
	return e.openHoldAt(t, "/v1/locks/"+name+"/hold", body, headerPairs...)
}

// openHoldAt is openHold of the hold route at path (any lock primitive's).
func (e *testEnv) openHoldAt(t testing.TB, path, body string, headerPairs ...string) *holdStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := e.Client.Do(e.newRequest(t, ctx, "POST", path, body, headerPairs...))
	if err != nil {
		cancel()
		t.Fatalf("hold %s: %v", path, err)
	}
	h := &holdStream{Status: resp.StatusCode, Header: resp.Header, Events: make(chan sseEvent, 64), cancel: cancel, done: make(chan struct{}),
		schemas: holdEventSchemas}
	if strings.HasPrefix(path, "/v1/elections/") {
		h.schemas = electionHoldEventSchemas
	}
	t.Cleanup(h.close)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h.Body = string(b)
		close(h.Events)
		close(h.done)
		return h
	}
	go func() {
		defer close(h.done)
		defer close(h.Events)
		defer resp.Body.Close()
		emit := func(ev sseEvent) {
			select {
			case h.Events <- ev:
			case <-ctx.Done():
			}
		}
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				emit(sseEvent{Comment: strings.TrimSpace(strings.TrimPrefix(line, ":"))})
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.Data)
			case line == "" && ev.Name != "":
				emit(ev)
				ev = sseEvent{}
			}
		}
	}()
	return h
}

// next returns the next event (skipping comments unless withComments), or
// fails the test after d.
func (h *holdStream) next(t testing.TB, d time.Duration, withComments bool) sseEvent {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-h.Events:
			if !ok {
				t.Fatalf("hold stream ended while waiting for an event")
			}
			if ev.Comment != "" && !withComments {
				continue
			}
			if ev.Comment == "" {
				wantEventSchema(t, ev, h.schemas)
			}
			return ev
		case <-timer.C:
			t.Fatalf("no hold event within %s", d)
		}
	}
}

// close disconnects the client and waits for the reader to stop.
func (h *holdStream) close() {
	h.cancel()
	<-h.done
}

// ended reports whether the server ended the stream within d.
func (h *holdStream) ended(d time.Duration) bool {
	select {
	case <-h.done:
		return true
	case <-time.After(d):
		return false
	}
}

// holdEventSchemas names the api/openapi.yaml schema of each hold event's data.
var holdEventSchemas = map[string]string{
	"acquired": "HoldAcquiredEvent", "renewed": "Lease", "lost": "HoldLostEvent", "released": "HoldReleasedEvent",
}

// electionHoldEventSchemas are holdEventSchemas of an election's hold,
// whose leases are ElectionLease.
var electionHoldEventSchemas = map[string]string{
	"acquired": "ElectionLease", "renewed": "ElectionLease", "lost": "HoldLostEvent", "released": "HoldReleasedEvent",
}

// wantEventSchema checks a hold event's data against its schema in
// api/openapi.yaml, as schemas names it (the harness checks a stream's
// headers only).
func wantEventSchema(t testing.TB, ev sseEvent, schemas map[string]string) {
	t.Helper()
	name, ok := schemas[ev.Name]
	if !ok {
		t.Errorf("hold event %q is not documented in api/openapi.yaml", ev.Name)
		return
	}
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	ref := doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		t.Fatalf("api/openapi.yaml has no schema %s", name)
	}
	data := map[string]any{}
	for k, v := range ev.Data {
		data[k] = v
	}
	if err := ref.Value.VisitJSON(data); err != nil {
		t.Errorf("%s event data %v does not match schema %s: %v", ev.Name, ev.Data, name, err)
	}
}

// curlHold starts `curl -N` posting body to the hold route at url, skipping
// (or failing, when required) without curl. It returns the process, killed
// when t ends, and its output's lines.
func curlHold(t *testing.T, url, body string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		skipOrFail(t, "curl is not installed (Debian: apt-get install curl)")
	}
	// --max-time ends curl, and with it the reads of its output, if the stream hangs.
	cmd := exec.Command(curl, "-sS", "-N", "--max-time", "60", "-X", "POST", "-H", "Content-Type: application/json",
		"-d", body, url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}
