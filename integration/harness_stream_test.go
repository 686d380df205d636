package integration

// The harness's client of hold streams (POST /v1/locks/{name}/hold) and
// watch streams (GET /v1/locks/{name}/events): Server-Sent Events read in
// the background, each checked against its schema.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/latchkey/latchkey/api"
)

// sseEvent is one Server-Sent Event, or a comment line when Comment is set.
type sseEvent struct {
	ID      string
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
	cancel context.CancelFunc
	done   chan struct{}
	// schemas name the api/openapi.yaml schema of each event's data.
	schemas map[string]string
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
	schemas := holdEventSchemas
	if strings.HasPrefix(path, "/v1/elections/") {
		schemas = electionHoldEventSchemas
	}
	return e.openStream(t, "POST", path, body, schemas, headerPairs...)
}

// openWatch opens the watch stream at path (a primitive's
// /v1/.../{name}/events), whose state event's data is stateSchema.
func (e *testEnv) openWatch(t testing.TB, path, stateSchema string, headerPairs ...string) *holdStream {
	t.Helper()
	schemas := map[string]string{"state": stateSchema}
	for _, ev := range []string{"acquired", "released", "expired", "lost", "force-released"} {
		schemas[ev] = "WatchLeaseEvent"
	}
	return e.openStream(t, "GET", path, "", schemas, headerPairs...)
}

// openStream sends method path with body and reads its event stream, each
// event's data checked against its schema in schemas.
func (e *testEnv) openStream(t testing.TB, method, path, body string, schemas map[string]string, headerPairs ...string) *holdStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := e.Client.Do(e.newRequest(t, ctx, method, path, body, headerPairs...))
	if err != nil {
		cancel()
		t.Fatalf("stream %s: %v", path, err)
	}
	h := &holdStream{Status: resp.StatusCode, Header: resp.Header, Events: make(chan sseEvent, 64), cancel: cancel,
		done: make(chan struct{}), schemas: schemas}
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
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
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
				t.Fatalf("stream ended while waiting for an event")
			}
			if ev.Comment != "" && !withComments {
				continue
			}
			if ev.Comment == "" {
				wantEventSchema(t, h.schemas, ev)
			}
			return ev
		case <-timer.C:
			t.Fatalf("no stream event within %s", d)
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

// eventSpec is api/openapi.yaml, loaded once for the checks of every
// stream's events: a watch test reads hundreds.
var eventSpec = sync.OnceValues(func() (*openapi3.T, error) { return openapi3.NewLoader().LoadFromData(api.Spec) })

// wantEventSchema checks an event's data against its schema in
// api/openapi.yaml, as schemas name it (the harness checks a stream's
// headers only).
func wantEventSchema(t testing.TB, schemas map[string]string, ev sseEvent) {
	t.Helper()
	name, ok := schemas[ev.Name]
	if !ok {
		t.Errorf("stream event %q is not documented in api/openapi.yaml", ev.Name)
		return
	}
	doc, err := eventSpec()
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
