package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Each event is counted once, when the blank line that ends it arrives:
// comments, ids and data lines are not events, and an event without a type
// is a message.
func TestReadEventsCountsEachEventByType(t *testing.T) {
	stream := ": ping\n\n" +
		"id: 1-0\nevent: state\ndata: {\"held\":false}\n\n" +
		": ping\n\n" +
		"id: 2-7\nevent: acquired\ndata: {\"fence\":7}\n\n" +
		"id: 3-7\nevent: released\ndata: {\"fence\":7}\n\n" +
		"data: bare\n\n" +
		"event: acquired\ndata: {\"fence\":8}\n" // cut before its end: not yet an event
	var got []string
	if err := readEvents(strings.NewReader(stream), func(typ string) { got = append(got, typ) }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"state", "acquired", "released", "message"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Every watcher of a name should see each of its changes: the missing ones
// are the difference.
func TestDeliveryNoteCountsMissingEvents(t *testing.T) {
	for _, tt := range []struct {
		delivered, changes, perName int64
		want                        string
	}{
		{1000, 10, 100, "1000 of 1000 expected events delivered (1.0000), 0 missing: 10 changes × 100 watchers each"},
		{990, 10, 100, "990 of 1000 expected events delivered (0.9900), 10 missing: 10 changes × 100 watchers each"},
		{0, 0, 100, "no change made: nothing expected"},
	} {
		if got := deliveryNote(tt.delivered, tt.changes, tt.perName); got != tt.want {
			t.Errorf("deliveryNote(%d, %d, %d) = %q, want %q", tt.delivered, tt.changes, tt.perName, got, tt.want)
		}
	}
}
