package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/auth"
)

func sha(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

var exampleFile = `
defaults:
  quotas: {leases: 100, waiters: 10}
tenants:
  billing:
    quotas: {leases: 5, requests_per_second: 50}
    keys:
      - id: billing-ci
        sha256: ` + sha("billing-secret") + `
        scopes: [locks:read, locks:write, ratelimit:check]
        names: ["billing:*", "shared"]
  search:
    keys:
      - {id: search, sha256: ` + strings.ToUpper(sha("search-secret")) + `, scopes: [locks:read]}
admin:
  keys:
    - {id: ops, sha256: "` + sha("ops-secret") + `", scopes: [admin, locks:read]}
public_gate: [sidecar]
`

func TestParse(t *testing.T) {
	set, err := auth.Parse([]byte(exampleFile))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"billing", "search"}, set.Tenants()); diff != "" {
		t.Errorf("tenants (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"billing-ci", "ops", "search"}, set.KeyIDs()); diff != "" {
		t.Errorf("key ids (-want +got):\n%s", diff)
	}
	if got, want := set.Tenant("billing").Quotas, (auth.Quotas{Leases: 5, Waiters: 10, RequestsPerSecond: 50}); got != want {
		t.Errorf("billing quotas = %+v, want %+v (its own, the rest from defaults)", got, want)
	}
	if got, want := set.Tenant("search").Quotas, (auth.Quotas{Leases: 100, Waiters: 10}); got != want {
		t.Errorf("search quotas = %+v, want the defaults %+v", got, want)
	}
	k := set.Lookup("billing-secret")
	if k == nil || k.ID != "billing-ci" || k.TenantName() != "billing" {
		t.Fatalf("Lookup(billing secret) = %+v, want billing-ci of billing", k)
	}
	if !k.Has(auth.ScopeLocksWrite) || k.Has(auth.ScopeAdmin) {
		t.Errorf("billing-ci scopes = %v", k.Scopes)
	}
	for name, want := range map[string]bool{"billing:x": true, "billing:": true, "billing": false, "shared": true, "shared2": false, "orders": false} {
		if got := k.MayName(name); got != want {
			t.Errorf("MayName(%q) = %v, want %v", name, got, want)
		}
	}
	if k := set.Lookup("search-secret"); k == nil || k.ID != "search" {
		t.Errorf("an upper-case hash does not match: %+v", k)
	}
	if k := set.Lookup("ops-secret"); k == nil || k.Tenant != nil || !k.MayName("anything") {
		t.Errorf("Lookup(ops) = %+v, want an admin-section key", k)
	}
	for _, s := range []string{"", "billing-secret ", "Billing-secret", sha("billing-secret")} {
		if k := set.Lookup(s); k != nil {
			t.Errorf("Lookup(%q) = %s, want nil", s, k.ID)
		}
	}
	if !set.PublicGate("sidecar") || set.PublicGate("api") {
		t.Error("public_gate: want sidecar only")
	}
	var none *auth.KeySet
	if none.Lookup("x") != nil || none.Tenant("billing") != nil || none.PublicGate("sidecar") {
		t.Error("a nil set matches something")
	}
}

func TestParseErrors(t *testing.T) {
	h := sha("x")
	tests := []struct{ name, file, want string }{
		{"unknown field", "tenants:\n  a:\n    kyes: []\n", `line 3: unknown field "kyes" in tenants.a: the fields there are quotas, keys`},
		{"unknown key field", "admin:\n  keys:\n    - {id: k, sha256: " + h + ", scope: [admin]}\n", `unknown field "scope" in admin.keys[0]: the fields there are id, sha256, scopes, names`},
		{"unknown quota", "defaults:\n  quotas: {lease: 1}\n", `unknown field "lease" in defaults.quotas: the fields there are leases, waiters, requests_per_second`},
		{"unknown field through an anchor", "defaults:\n  quotas: &q {leases: 1, lease: 2}\ntenants:\n  a:\n    quotas: {<<: *q}\n", `unknown field "lease" in defaults.quotas`},
		{"unknown top-level field", "tenant: {}\n", `unknown field "tenant" in the top level: the fields there are defaults, tenants, admin, public_gate`},
		{"bad tenant name", "tenants:\n  Billing:\n    keys: []\n", "tenants.Billing: tenant name"},
		{"tenant name with colon", "tenants:\n  a:b:\n    keys: []\n", "tenant name"},
		{"long tenant name", "tenants:\n  " + strings.Repeat("a", 33) + ":\n    keys: []\n", "tenant name"},
		{"bad hash", "admin:\n  keys:\n    - {id: k, sha256: abc, scopes: [admin]}\n", "admin.keys[0] (k): sha256"},
		{"no scopes", "admin:\n  keys:\n    - {id: k, sha256: " + h + "}\n", "scopes is empty"},
		{"unknown scope", "admin:\n  keys:\n    - {id: k, sha256: " + h + ", scopes: [root]}\n", `unknown scope "root"`},
		{"bad id", "admin:\n  keys:\n    - {id: 'a b', sha256: " + h + ", scopes: [admin]}\n", "id must be"},
		{"duplicate id", "admin:\n  keys:\n    - {id: k, sha256: " + h + ", scopes: [admin]}\n    - {id: k, sha256: " + sha("y") + ", scopes: [admin]}\n", `key id "k" is also used`},
		{"duplicate hash", "admin:\n  keys:\n    - {id: k, sha256: " + h + ", scopes: [admin]}\n    - {id: j, sha256: " + h + ", scopes: [admin]}\n", "also the hash of key k"},
		{"bad name pattern", "admin:\n  keys:\n    - {id: k, sha256: " + h + ", scopes: [admin], names: ['a*b']}\n", "names[0]"},
		{"negative quota", "defaults:\n  quotas: {leases: -1}\n", "defaults.quotas"},
		{"bad public policy", "public_gate: ['a b']\n", "public_gate[0]"},
		{"not yaml", "tenants: [", "keys file"},
		// A value of the wrong kind is named by its path and line, with what
		// the field takes in words.
		{"tenants as a list", "tenants: [a, b]\n", "keys file: line 1: tenants must be a map of tenant names to tenants, got a list"},
		{"tenant as a list", "tenants:\n  a: [x]\n", "line 2: tenants.a must be a map of the fields quotas, keys, got a list"},
		{"scopes as a string", "tenants:\n  a:\n    keys:\n      - {id: k, sha256: " + h + ", scopes: locks:read}\n",
			"line 4: tenants.a.keys[0].scopes must be a list of scopes, got a string"},
		{"quota as a word", "tenants:\n  a:\n    quotas: {leases: \"many\"}\n", "line 3: tenants.a.quotas.leases must be a whole number, got a string"},
		{"quota as a fraction", "defaults:\n  quotas: {waiters: 1.5}\n", "line 2: defaults.quotas.waiters must be a whole number, got a number"},
		{"quota out of range", "defaults:\n  quotas: {waiters: 99999999999999999999}\n", "defaults.quotas.waiters must be a whole number, got a whole number out of range"},
		{"keys as a map", "admin:\n  keys: {id: k}\n", "line 2: admin.keys must be a list of keys, got a map"},
		{"id as a list", "admin:\n  keys:\n    - {id: [k], sha256: " + h + ", scopes: [admin]}\n", "line 3: admin.keys[0].id must be a string, got a list"},
		{"public gate as a string", "public_gate: sidecar\n", "line 1: public_gate must be a list of policy names, got a string"},
		{"file as a list", "- a\n", "line 1: the top level must be a map of the fields defaults, tenants, admin, public_gate, got a list"},
		{"tenant given twice", "tenants:\n  a: {}\n  a: {}\n", `line 3: "a" is given twice in tenants (first at line 2)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := auth.Parse([]byte(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %v, want one containing %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), h) {
				t.Errorf("error %v repeats a hash", err)
			}
			wantNoGoType(t, err)
		})
	}
}

// wantNoGoType fails the test if err prints a Go type: a keys file's
// errors speak of its fields, not of the code that reads them.
func wantNoGoType(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, marker := range []string{"struct {", "map[", "[]", "auth.", "int64", "string}", "!!", "unmarshal"} {
		if strings.Contains(err.Error(), marker) {
			t.Errorf("error %q prints a Go type (%q)", err, marker)
		}
	}
}

// TestParseMergeKeys: YAML's merge keys (<<: *anchor) bring an anchor's
// fields in, and are no unknown field.
func TestParseMergeKeys(t *testing.T) {
	file := "defaults:\n  quotas: &q {leases: 7}\ntenants:\n  a:\n    quotas: {<<: *q, waiters: 3}\n    keys:\n" +
		"      - &k {id: a1, sha256: " + sha("a1") + ", scopes: [locks:read]}\n      - {<<: *k, id: a2, sha256: " + sha("a2") + "}\n"
	set, err := auth.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set.Tenant("a").Quotas, (auth.Quotas{Leases: 7, Waiters: 3}); got != want {
		t.Errorf("quotas = %+v, want %+v", got, want)
	}
	if k := set.Lookup("a2"); k == nil || !k.Has(auth.ScopeLocksRead) {
		t.Errorf("Lookup(a2) = %+v, want a key with the merged scopes", k)
	}
}

// TestParseRefusesAFileWithNoKey: a file that names no key would refuse
// every request (401); it is refused like a missing file instead. An empty
// file is also what a reader sees of a file being written in place.
func TestParseRefusesAFileWithNoKey(t *testing.T) {
	for name, file := range map[string]string{
		"empty":                "",
		"comments only":        "# keys\n",
		"no keys in a tenant":  "tenants:\n  billing:\n    keys: []\n",
		"quotas but no keys":   "defaults:\n  quotas: {leases: 1}\ntenants:\n  billing: {}\n",
		"an empty admin list":  "admin:\n  keys: []\n",
		"public gate and none": "public_gate: [sidecar]\n",
	} {
		set, err := auth.Parse([]byte(file))
		if err == nil || !strings.Contains(err.Error(), "names no key") {
			t.Errorf("%s: Parse = %v, %v; want an error saying it names no key", name, set.KeyIDs(), err)
		}
	}
}

func TestParseBearer(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER  abc==", "abc==", true},
		{"Bearer a-b.c_d~e+f/g", "a-b.c_d~e+f/g", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"Bearerabc", "", false},
		{"Bearer abc def", "", false},
		{"Bearer =abc", "", false},
		{"Bearer ab=c", "", false},
		{"Bearer abc\n", "", false},
		{"Bearer " + strings.Repeat("a", auth.MaxSecretLen), strings.Repeat("a", auth.MaxSecretLen), true},
		{"Bearer " + strings.Repeat("a", auth.MaxSecretLen+1), "", false},
	}
	for _, tt := range tests {
		got, ok := auth.ParseBearer(tt.header)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseBearer(%q) = %q, %v; want %q, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParseBearer: whatever the header, a secret accepted is a non-empty
// b64token the header ends with, and the header is "Bearer" (any case),
// spaces and the secret.
func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  a==", "Basic x", "Bearer a b", "Bearer \x00", "Bearer é", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		secret, ok := auth.ParseBearer(header)
		if !ok {
			if secret != "" {
				t.Fatalf("refused %q but returned %q", header, secret)
			}
			return
		}
		if secret == "" || len(secret) > auth.MaxSecretLen {
			t.Fatalf("accepted %q with secret %q", header, secret)
		}
		scheme, rest, _ := strings.Cut(header, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimLeft(rest, " ") != secret {
			t.Fatalf("accepted %q as %q", header, secret)
		}
		body := strings.TrimRight(secret, "=")
		if body == "" {
			t.Fatalf("accepted %q: only padding", header)
		}
		for _, c := range []byte(body) {
			if !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/", rune(c)) {
				t.Fatalf("accepted %q with byte %q", header, c)
			}
		}
	})
}

// TestExampleFile: the keys file of deploy/ parses.
func TestExampleFile(t *testing.T) {
	b, err := os.ReadFile("../../deploy/keys.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := auth.Parse(b)
	if err != nil {
		t.Fatalf("deploy/keys.example.yaml: %v", err)
	}
	if got := set.Tenants(); len(got) != 3 {
		t.Errorf("tenants = %v, want billing, edge, search", got)
	}
}
