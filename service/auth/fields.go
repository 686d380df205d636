package auth

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unknownField returns an error for the first field of the YAML document n
// that the file's shape t has no place for, naming where it is and the
// fields allowed there; nil when there is none. (The YAML decoder's own
// error names a Go struct type instead.)
func unknownField(n *yaml.Node, t reflect.Type, where string) error {
	for n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		var names []string
		for _, f := range reflect.VisibleFields(t) {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" { // <<: *anchor brings its fields here
				if err := unknownField(v, t, where); err != nil {
					return err
				}
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				in := "the top level"
				if where != "" {
					in = where
				}
				return fmt.Errorf("line %d: unknown field %q in %s: the fields there are %s", k.Line, k.Value, in, strings.Join(names, ", "))
			}
			if err := unknownField(v, ft, joinField(where, k.Value)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := unknownField(n.Content[i+1], t.Elem(), joinField(where, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Struct && n.Kind == yaml.SequenceNode: // <<: [*a, *b]
		for _, c := range n.Content {
			if err := unknownField(c, t, where); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			if err := unknownField(c, t.Elem(), fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinField(where, name string) string {
	if where == "" {
		return name
	}
	return where + "." + name
}
