package store_test

import (
	"testing"

	"github.com/latchkey/latchkey/service/store"
)

// The slots Redis Cluster's specification and CLUSTER KEYSLOT give.
func TestSlotIsRedisClusterKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":               0x31C3,
		"foo":                     12182,
		"bar":                     5061,
		"{user1000}.following":    store.Slot("user1000"),
		"foo{}{bar}":              store.Slot("foo{}{bar}"),
		"latchkey:lock:{orders}":  store.Slot("orders"),
		"latchkey:fence:{orders}": store.Slot("orders"),
		"{}":                      store.Slot("{}"),
		"":                        0,
	} {
		if got := store.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if store.Slot("user1000") == store.Slot("{user1000") {
		t.Fatalf("an unclosed brace must not start a tag")
	}
	if store.Slot("foo{}{bar}") == store.Slot("bar") {
		t.Fatalf("an empty tag must make the whole key count")
	}
}
