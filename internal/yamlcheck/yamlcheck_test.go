package yamlcheck_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/internal/yamlcheck"
	"go.yaml.in/yaml/v3"
)

type file struct {
	Groups map[string]group `yaml:"groups" expect:"a map of group names to groups"`
	Tags   []string         `yaml:"tags" expect:"a list of tags"`
	Size   *size            `yaml:"size"`
}

type group struct {
	inner `yaml:",inline"`
	On    bool `yaml:"on"`
}

type inner struct {
	Count int64   `yaml:"count"`
	Ratio float64 `yaml:"ratio"`
}

// size reads "small" or {n: N} itself.
type size struct {
	N int64 `yaml:"n"`
}

func (s *size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "small" {
		s.N = 1
		return nil
	}
	if n.Kind == yaml.MappingNode {
		type plain size
		return n.Decode((*plain)(s))
	}
	return errors.New(`size must be "small" or {n: N}`)
}

func TestUnmarshal(t *testing.T) {
	src := `
base: &base {count: 2}
groups:
  a: {<<: *base, on: true}
  b: {<<: [*base], ratio: 0.5}
  c: ~
tags: [x, 7]
size: small
`
	var f struct {
		Base group `yaml:"base"`
		file `yaml:",inline"`
	}
	if err := yamlcheck.Unmarshal([]byte(src), &f); err != nil {
		t.Fatal(err)
	}
	want := file{
		Groups: map[string]group{"a": {inner: inner{Count: 2}, On: true}, "b": {inner: inner{Count: 2, Ratio: 0.5}}, "c": {}},
		Tags:   []string{"x", "7"},
		Size:   &size{N: 1},
	}
	if diff := cmp.Diff(want, f.file, cmp.AllowUnexported(group{})); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	var empty file
	if err := yamlcheck.Unmarshal(nil, &empty); err != nil || empty.Groups != nil {
		t.Errorf("empty document: %v, %+v; want nothing decoded", err, empty)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown field", "groups:\n  a: {count: 1, cnt: 2}\n", `line 2: unknown field "cnt" in groups.a: the fields there are count, ratio, on`},
		{"unknown top-level field", "group: {}\n", `line 1: unknown field "group" in the top level: the fields there are groups, tags, size`},
		{"unknown field through a merge", "groups:\n  a: &a {count: 1, cnt: 2}\n  b: {<<: *a}\n", `line 2: unknown field "cnt" in groups.a`},
		{"merge of a list of strings", "groups:\n  a: {<<: [x]}\n", "line 2: a merge (<<) in groups.a must bring a map or a list of maps, got a string"},
		{"expect tag", "groups: [a]\n", "line 1: groups must be a map of group names to groups, got a list"},
		{"struct", "groups:\n  a: 3\n", "line 2: groups.a must be a map of the fields count, ratio, on, got a whole number"},
		{"list", "tags: x\n", "line 1: tags must be a list of tags, got a string"},
		{"string", "tags: [{a: 1}]\n", "line 1: tags[0] must be a string, got a map"},
		{"whole number", "groups:\n  a:\n    count: lots\n", "line 3: groups.a.count must be a whole number, got a string"},
		{"fraction", "groups:\n  a: {count: 2.5}\n", "line 2: groups.a.count must be a whole number, got a number"},
		{"out of range", "groups:\n  a: {count: 99999999999999999999}\n", "groups.a.count must be a whole number, got a whole number out of range"},
		{"number", "groups:\n  a: {ratio: half}\n", "groups.a.ratio must be a number, got a string"},
		{"boolean", "groups:\n  a: {on: maybe}\n", "groups.a.on must be true or false, got a string"},
		{"top level", "[1]\n", "line 1: the top level must be a map of the fields groups, tags, size, got a list"},
		{"name of the wrong kind", "groups:\n  [a]: {}\n", "line 2: a name in groups must be a string, got a list"},
		{"field given twice", "tags: []\ntags: []\n", `line 2: "tags" is given twice in the top level (first at line 1)`},
		{"name given twice", "groups:\n  a: {}\n  a: {}\n", `line 3: "a" is given twice in groups (first at line 2)`},
		{"a type's own error", "size: [1]\n", `line 1: size: size must be "small" or {n: N}`},
		{"a type's own fields", "size: {n: x}\n", "line 1: size.n must be a whole number, got a string"},
		{"malformed", "groups: [", "yaml: line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f file
			err := yamlcheck.Unmarshal([]byte(tt.src), &f)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal error = %v, want one containing %q", err, tt.want)
			}
			for _, marker := range []string{"struct {", "map[", "[]", "yamlcheck", "int64", "float64", "!!", "unmarshal"} {
				if strings.Contains(err.Error(), marker) {
					t.Errorf("error %q prints a Go type (%q)", err, marker)
				}
			}
		})
	}
}
