package locks_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

func TestKeysOfEveryKindShareOneHashTag(t *testing.T) {
	tag := regexp.MustCompile(`\{([^}]*)\}`)
	for _, kind := range []string{"", "rw"} {
		keys := locks.KeysOfKind("lk:", kind, "orders:42")
		seen := map[string]bool{}
		for _, k := range keys {
			m := tag.FindAllStringSubmatch(k, -1)
			if len(m) != 1 || m[0][1] != "orders:42" {
				t.Errorf("kind %q: key %q, want exactly one hash tag {orders:42}", kind, k)
			}
			if !strings.HasPrefix(k, "lk:") {
				t.Errorf("kind %q: key %q lacks the prefix", kind, k)
			}
			if seen[k] {
				t.Errorf("kind %q: key %q named twice", kind, k)
			}
			seen[k] = true
		}
	}
	// The exclusive lock's keys are the ones it had before other kinds.
	want := []string{"lk:lock:{n}", "lk:fence:{n}", "lk:unlock:{n}", "lk:waiters:{n}", "lk:queue:{n}", "lk:lost:{n}"}
	if got := locks.KeysOfKind("lk:", "", "n"); !slices.Equal(got, want) {
		t.Errorf("exclusive keys = %v, want %v", got, want)
	}
	k := locks.KeysOf("lk:", "n")
	if got := []string{k.Lock, k.Fence, k.Channel, k.Waiters, k.Queue, k.Lost}; !slices.Equal(got, want) {
		t.Errorf("KeysOf = %v, want %v", got, want)
	}
	// No key of another kind is a key of the exclusive lock, whatever its name.
	excl := map[string]bool{}
	for _, k := range locks.KeysOfKind("lk:", "", "rw:lock:x") {
		excl[k] = true
	}
	for _, k := range locks.KeysOfKind("lk:", "rw", "x") {
		if excl[k] {
			t.Errorf("rw key %q is also an exclusive lock's key", k)
		}
	}
}

func TestRegistryMembersNameTheirPrimitive(t *testing.T) {
	tok := strings.Repeat("T", 22)
	cases := []struct {
		kind, name, member string
	}{
		{"", "orders", tok + ":orders"}, // as written before other kinds existed
		{"", "rw:orders", tok + ":rw:orders"},
		{"rw", "orders", "rw/" + tok + ":orders"},
		{"rw", "a:b", "rw/" + tok + ":a:b"},
	}
	for _, c := range cases {
		if got := locks.RegistryMember(c.kind, tok, c.name); got != c.member {
			t.Errorf("member(%q, %q) = %q, want %q", c.kind, c.name, got, c.member)
		}
		kind, name, ok := locks.ParseMember(c.member)
		if !ok || kind != c.kind || name != c.name {
			t.Errorf("ParseMember(%q) = %q, %q, %v; want %q, %q, true", c.member, kind, name, ok, c.kind, c.name)
		}
	}
	for _, bad := range []string{"junk", tok + ":", tok + ":{x}", "rw/" + tok, "rw/" + tok + ":a/b"} {
		if _, _, ok := locks.ParseMember(bad); ok {
			t.Errorf("ParseMember(%q) ok, want refused", bad)
		}
	}
}

// Registry entries of other primitives are well-formed for keepalive_due:
// they are listed, not dropped, while malformed ones are dropped. An entry
// of a kind this version does not know is left for an instance that does.
func TestRegistryKeepsEntriesOfOtherKinds(t *testing.T) {
	svc, m := newTestService(t, locks.Config{RenewBatch: 10})
	ctx := t.Context()
	now := t0
	registry := locks.KeyPrefix(svc) + "keepalive"
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true})
	tok := strings.Repeat("T", 22)
	other := "zz/" + tok + ":orders"
	for _, mem := range []string{other, "ZZ/" + tok + ":orders", "zz/short:orders", "zz/" + tok + ":{x}"} {
		if _, err := m.ZAdd(registry, 0, mem); err != nil {
			t.Fatal(err)
		}
	}
	advance(m, &now, 1500*time.Millisecond)
	for range 3 {
		locks.RenewDueNow(ctx, svc)
	}
	if got := mustInspect(t, svc, "orders", l.Token); got.TTL != 3*time.Second {
		t.Errorf("lease TTL after the renewer ran = %s, want renewed to 3s", got.TTL)
	}
	members, _ := m.ZMembers(registry)
	slices.Sort(members)
	want := []string{l.Token + ":orders", other}
	slices.Sort(want)
	if !slices.Equal(members, want) {
		t.Errorf("registry = %v, want %v", members, want)
	}
}
