package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// configRow is one flag as the README's configuration table or the server's
// usage text describes it.
type configRow struct {
	Env     string // "—" when the flag has no environment variable
	Default string // as the flag package prints it; "(empty)" for an empty string
}

var (
	usageEnvRE     = regexp.MustCompile(`\((LATCHKEY_[A-Z0-9_]+)\)`)
	usageDefaultRE = regexp.MustCompile(`\(default (.+)\)$`)
)

// usageRows reads every flag from the server's -h output, as it is with an
// empty environment.
func usageRows(t *testing.T) map[string]configRow {
	t.Helper()
	var out bytes.Buffer
	_, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseConfig -h: %v, want flag.ErrHelp", err)
	}
	rows := map[string]configRow{}
	sc := bufio.NewScanner(&out)
	var name, typ string
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			name, typ, _ = strings.Cut(rest, " ")
			continue
		}
		if name == "" {
			continue
		}
		usage := strings.TrimSpace(line)
		row := configRow{Env: "—", Default: zeroDefault(typ)}
		if m := usageEnvRE.FindStringSubmatch(usage); m != nil {
			row.Env = m[1]
		}
		if m := usageDefaultRE.FindStringSubmatch(usage); m != nil {
			row.Default = m[1]
			if s, err := strconv.Unquote(m[1]); err == nil {
				row.Default = s
			}
		}
		rows[name] = row
		name = ""
	}
	return rows
}

// zeroDefault is what a flag of the usage type typ defaults to when the
// usage text prints no default.
func zeroDefault(typ string) string {
	switch typ {
	case "":
		return "false"
	case "int", "uint", "float":
		return "0"
	case "duration":
		return "0s"
	}
	return "(empty)"
}

// readmeRows reads the configuration table of README.md: rows of the form
// | `-flag` | `ENV` | `default` | meaning |.
func readmeRows(t *testing.T) map[string]configRow {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]configRow{}
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(line, "| `-") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 {
			t.Errorf("README configuration row %q has fewer than 4 cells", line)
			continue
		}
		unquote := func(c string) string { return strings.Trim(strings.TrimSpace(c), "`") }
		name := strings.TrimPrefix(unquote(cells[0]), "-")
		if _, dup := rows[name]; dup {
			t.Errorf("README lists -%s twice", name)
		}
		rows[name] = configRow{Env: unquote(cells[1]), Default: unquote(cells[2])}
	}
	return rows
}

// The README's configuration table lists every flag of the server, with its
// environment variable and default, and nothing else.
func TestREADMEConfigurationTable(t *testing.T) {
	if diff := cmp.Diff(usageRows(t), readmeRows(t)); diff != "" {
		t.Errorf("README.md's Configuration table differs from the server's flags (-flags +README); "+
			"give every flag a row | `-flag` | `LATCHKEY_VAR` or — | `default` | meaning |:\n%s", diff)
	}
}
