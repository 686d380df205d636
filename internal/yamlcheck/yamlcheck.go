// Package yamlcheck decodes Latchkey's YAML files (the keys file, the
// policies file) so that every error names the field at fault by its path
// (tenants.a.keys[0].scopes), its line and what the field takes, in words,
// and never a Go type, as the YAML decoder's own errors do.
//
// A field may say what it takes with an expect tag, read where the field is
// wrong:
//
//	Scopes []string `yaml:"scopes" expect:"a list of scopes"`
//
// Without one, the words come from the field's kind: "a whole number", "a
// string", "true or false", "a list", "a map", "a map of the fields a, b".
package yamlcheck

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Unmarshal decodes the YAML document b into v, a pointer to the file's
// shape, once the document is known to fit it; an empty document leaves v
// as it was. Returns an error naming the line, and the field by its path,
// for malformed YAML, a field v has no place for (with the fields allowed
// there), a field or name given twice in one map, and a value of the wrong
// kind (with what the field takes). An error of a type's own UnmarshalYAML
// is returned after the line and the field's path.
func Unmarshal(b []byte, v any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if doc.Kind == 0 { // no document at all
		return nil
	}
	if err := check(&doc, reflect.TypeOf(v), "", ""); err != nil {
		return err
	}
	return doc.Decode(v)
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// check returns an error for the first place where the YAML node n does not
// fit the Go type t; where is n's path ("" at the top level), expect what
// n's field takes ("" for the words of t's kind).
func check(n *yaml.Node, t reflect.Type, where, expect string) error {
	n = resolve(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // the field's zero value
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) && (t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode) {
		// The type reads other forms itself (a string for a map, say): it
		// says what is wrong with them.
		if err := reflect.New(t).Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			return fmt.Errorf("line %d: %s: %w", n.Line, subject(where), err)
		}
		return nil
	}
	if expect == "" {
		expect = describe(t)
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return mismatch(n, t, where, expect)
		}
		return checkStruct(n, t, where, map[string]int{})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return mismatch(n, t, where, expect)
		}
		return checkMap(n, t, where, map[string]int{})
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return mismatch(n, t, where, expect)
		}
		for i, c := range n.Content {
			if err := check(c, t.Elem(), fmt.Sprintf("%s[%d]", where, i), ""); err != nil {
				return err
			}
		}
		return nil
	case reflect.Interface:
		return nil // anything goes
	}
	if n.Kind != yaml.ScalarNode || n.Decode(reflect.New(t).Interface()) != nil ||
		describe(t) == "a whole number" && n.ShortTag() != "!!int" { // the decoder would cut 1.5 to 1
		return mismatch(n, t, where, expect)
	}
	return nil
}

// checkStruct checks the mapping n against struct type t's fields; seen
// holds the line of each field given so far in n.
func checkStruct(n *yaml.Node, t reflect.Type, where string, seen map[string]int) error {
	fs := fields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMerge(k) { // <<: *anchor brings its fields here
			if err := eachMerged(v, where, func(m *yaml.Node) error { return checkStruct(m, t, where, map[string]int{}) }); err != nil {
				return err
			}
			continue
		}
		if err := once(k, where, seen); err != nil {
			return err
		}
		f, ok := fs.byName[k.Value]
		if !ok {
			return fmt.Errorf("line %d: unknown field %q in %s: the fields there are %s", k.Line, k.Value, subject(where), strings.Join(fs.names, ", "))
		}
		if err := check(v, f.Type, join(where, k.Value), f.Tag.Get("expect")); err != nil {
			return err
		}
	}
	return nil
}

// checkMap checks the mapping n against map type t: each name, then what it
// names; seen holds the line of each name given so far in n.
func checkMap(n *yaml.Node, t reflect.Type, where string, seen map[string]int) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if isMerge(k) {
			if err := eachMerged(v, where, func(m *yaml.Node) error { return checkMap(m, t, where, map[string]int{}) }); err != nil {
				return err
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Decode(reflect.New(t.Key()).Interface()) != nil {
			return fmt.Errorf("line %d: a name in %s must be %s, got %s", k.Line, subject(where), describe(t.Key()), got(k, t.Key()))
		}
		if err := once(k, where, seen); err != nil {
			return err
		}
		if err := check(v, t.Elem(), join(where, k.Value), ""); err != nil {
			return err
		}
	}
	return nil
}

// once refuses a field or name given twice in one map, as the decoder
// would, naming where.
func once(k *yaml.Node, where string, seen map[string]int) error {
	if first, dup := seen[k.Value]; dup {
		return fmt.Errorf("line %d: %q is given twice in %s (first at line %d): give each once", k.Line, k.Value, subject(where), first)
	}
	seen[k.Value] = k.Line
	return nil
}

func isMerge(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" }

// eachMerged calls fn on each map a merge key's value v brings in: one map,
// or a list of them (<<: [*a, *b]).
func eachMerged(v *yaml.Node, where string, fn func(*yaml.Node) error) error {
	v = resolve(v)
	ms := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		ms = v.Content
	}
	for _, m := range ms {
		if m = resolve(m); m.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: a merge (<<) in %s must bring a map or a list of maps, got %s", m.Line, subject(where), got(m, nil))
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// resolve is the node n stands for: the document's one node, an alias's
// anchor.
func resolve(n *yaml.Node) *yaml.Node {
	for {
		switch {
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		case n.Kind == yaml.AliasNode && n.Alias != nil:
			n = n.Alias
		default:
			return n
		}
	}
}

// fieldSet is a struct type's YAML fields, its embedded structs' included.
type fieldSet struct {
	byName map[string]reflect.StructField
	names  []string // in the order of the struct
}

func fields(t reflect.Type) fieldSet {
	fs := fieldSet{byName: map[string]reflect.StructField{}}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fs.byName[name] = f
		fs.names = append(fs.names, name)
	}
	return fs
}

func mismatch(n *yaml.Node, t reflect.Type, where, expect string) error {
	return fmt.Errorf("line %d: %s must be %s, got %s", n.Line, subject(where), expect, got(n, t))
}

// describe says in words what a value of type t is written as.
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct:
		return "a map of the fields " + strings.Join(fields(t).names, ", ")
	}
	return "a map"
}

// got says in words what the node n is; t, the type n was to fit, tells a
// whole number out of its range from a value of another kind.
func got(n *yaml.Node, t reflect.Type) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	}
	var is string
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int":
		is = "a whole number"
	case "!!float":
		is = "a number"
		if strings.TrimLeft(strings.TrimLeft(n.Value, "+-"), "0123456789_") == "" {
			is = "a whole number" // too large for the decoder's integers
		}
	case "!!bool":
		return "true or false"
	default:
		return "another kind of value"
	}
	if t != nil && describe(t) == is {
		return is + " out of range"
	}
	return is
}

// subject names the field at path where, or the file's top level.
func subject(where string) string {
	if where == "" {
		return "the top level"
	}
	return where
}

func join(where, name string) string {
	if where == "" {
		return name
	}
	return where + "." + name
}
