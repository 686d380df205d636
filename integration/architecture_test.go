package integration

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/latchkey/latchkey/"

// pkgImports is one package of the module and what it imports directly:
// the module's own packages (without the module path) and third-party
// modules.
type pkgImports struct {
	path     string
	own      []string
	external []string
}

// moduleImports lists every package of the module but this one (tests
// only) with its direct imports, as go list -deps reports them.
func moduleImports(t *testing.T) ([]pkgImports, map[string][]string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-f",
		"{{.ImportPath}}\t{{if .Module}}{{.Module.Path}}{{end}}\t{{.Standard}}\t{{join .Imports \" \"}}", "./...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	moduleOf := map[string]string{}     // import path -> module path; "" for the standard library
	stdImports := map[string][]string{} // own package -> standard-library imports
	var pkgs []pkgImports
	var raw [][2]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 4 {
			t.Fatalf("go list line %q", sc.Text())
		}
		if f[2] != "true" {
			moduleOf[f[0]] = f[1]
		}
		if strings.HasPrefix(f[0], module) && f[0] != module+"integration" {
			raw = append(raw, [2]string{f[0], f[3]})
		}
	}
	for _, r := range raw {
		p := pkgImports{path: strings.TrimPrefix(r[0], module)}
		for _, imp := range strings.Fields(r[1]) {
			switch mod, ok := moduleOf[imp]; {
			case !ok:
				stdImports[p.path] = append(stdImports[p.path], imp)
			case strings.HasPrefix(imp, module):
				p.own = append(p.own, strings.TrimPrefix(imp, module))
			case !slices.Contains(p.external, mod):
				p.external = append(p.external, mod)
			}
		}
		slices.Sort(p.own)
		slices.Sort(p.external)
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b pkgImports) int { return strings.Compare(a.path, b.path) })
	return pkgs, stdImports
}

// importGraph is docs/architecture.md's import graph: each package, the
// module's packages it imports, then the third-party modules.
func importGraph(pkgs []pkgImports) string {
	var b strings.Builder
	for _, p := range pkgs {
		b.WriteString(p.path)
		b.WriteString(strings.Repeat(" ", max(1, 18-len(p.path))))
		b.WriteString("->")
		if len(p.own) == 0 && len(p.external) == 0 {
			b.WriteString(" (the standard library only)")
		}
		if len(p.own) > 0 {
			b.WriteString(" " + strings.Join(p.own, ", "))
		}
		if len(p.external) > 0 {
			if len(p.own) > 0 {
				b.WriteString(";")
			}
			b.WriteString(" " + strings.Join(p.external, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestImportGraphIsAsDocumented keeps the imports one way, as
// docs/architecture.md says, and its import graph the one go list reports.
func TestImportGraphIsAsDocumented(t *testing.T) {
	pkgs, std := moduleImports(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: %v", len(pkgs), pkgs)
	}
	isDomain := func(p string) bool { return strings.HasPrefix(p, "service/") && p != "service/store" }
	for _, p := range pkgs {
		imports := func(prefix string) []string {
			var hit []string
			for _, list := range [][]string{p.own, p.external, std[p.path]} {
				for _, imp := range list {
					if imp == prefix || strings.HasPrefix(imp, prefix+"/") {
						hit = append(hit, imp)
					}
				}
			}
			return hit
		}
		forbid := func(why string, prefixes ...string) {
			for _, prefix := range prefixes {
				if hit := imports(prefix); len(hit) > 0 {
					t.Errorf("%s imports %v: %s", p.path, hit, why)
				}
			}
		}
		allowOwn := func(why string, allowed ...string) {
			for _, imp := range p.own {
				if !slices.Contains(allowed, imp) {
					t.Errorf("%s imports %s: %s", p.path, imp, why)
				}
			}
		}
		switch {
		case p.path == "service/store":
			allowOwn("the store layer knows no domain and no other package of Latchkey")
		case isDomain(p.path):
			for _, imp := range p.own {
				if isDomain(imp) {
					t.Errorf("%s imports %s: a domain never imports another", p.path, imp)
				}
			}
			allowOwn("a domain imports only the store layer, the scripts and the YAML file checks", "service/store", "scripts/lua", "internal/yamlcheck")
		case p.path == "handlers":
			forbid("handlers reaches Redis only through the domains", "github.com/redis/go-redis", "scripts/lua")
			allowOwn("handlers imports the contract, the domains and the store's shared errors",
				"api", "service/auth", "service/locks", "service/ratelimit", "service/store")
		case p.path == "client":
			allowOwn("the client shares nothing with the server but the wire format")
			forbid("the client is what users import", "github.com/redis/go-redis")
		case p.path == "cmd/latchkey":
			allowOwn("the command line uses the client only", "client")
		case p.path == "api" || p.path == "scripts/lua" || p.path == "internal/yamlcheck":
			allowOwn("it is a leaf")
		}
		if strings.HasPrefix(p.path, "service/") {
			forbid("service knows nothing of HTTP", "net/http", "github.com/go-chi/chi", "github.com/go-playground/validator")
		}
	}

	doc, err := os.ReadFile(filepath.Join("..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- import graph: begin -->\n```text\n", "```\n<!-- import graph: end -->"
	_, rest, ok1 := strings.Cut(string(doc), begin)
	documented, _, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("docs/architecture.md has no import graph between %q and %q", begin, end)
	}
	if got := importGraph(pkgs); documented != got {
		t.Errorf("docs/architecture.md's import graph is not go list's; put this in its place:\n%s", got)
	}
}
