package ratelimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// unmarshalJSON decodes a policy file's JSON b into v as request bodies are
// decoded: exact member names, unknown members and a member given twice
// refused, nothing after the value. Its errors name the line and the field
// at fault by its path (policies.api.limits[0].limit), as the YAML file's
// do, and never a Go type.
func unmarshalJSON(b []byte, v any) error {
	if err := jsonv2.Unmarshal(b, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return jsonFileError(b, reflect.TypeOf(v), err)
	}
	return nil
}

// jsonFileError says what is wrong with the JSON b decoded into type t, and
// where.
func jsonFileError(b []byte, t reflect.Type, err error) error {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syn):
		f := jsonField(t, syn.JSONPointer.Parent())
		return fmt.Errorf("line %d: %q is given twice in %s: give each once", line(b, syn.ByteOffset), syn.JSONPointer.LastToken(), f.subject())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("malformed JSON: the file ends too early")
	case errors.As(err, &syn):
		return fmt.Errorf("line %d: malformed JSON at byte %d: %v", line(b, syn.ByteOffset), syn.ByteOffset, syn.Err)
	case errors.Is(err, jsonv2.ErrUnknownName) && errors.As(err, &sem):
		f := jsonField(t, sem.JSONPointer.Parent())
		msg := fmt.Sprintf("line %d: unknown field %q in %s", line(b, sem.ByteOffset), sem.JSONPointer.LastToken(), f.subject())
		if known := jsonFields(sem.GoType); known != "" {
			msg += ": the fields there are " + known
		}
		return errors.New(msg)
	case errors.As(err, &sem) && (errors.Is(sem.Err, strconv.ErrSyntax) || errors.Is(sem.Err, strconv.ErrRange)):
		f := jsonField(t, sem.JSONPointer) // 1.5, or 1e30, for a whole number
		got := "a JSON number"
		if errors.Is(sem.Err, strconv.ErrRange) {
			got += " out of range"
		}
		return fmt.Errorf("line %d: %s must be %s, got %s", line(b, sem.ByteOffset), f.subject(), f.want(sem.GoType), got)
	case errors.As(err, &sem) && sem.Err != nil && !errors.Is(sem.Err, jsonv2.ErrUnknownName):
		f := jsonField(t, sem.JSONPointer) // a field's own decoder said why (cost)
		return fmt.Errorf("line %d: %s: %w", line(b, sem.ByteOffset), f.subject(), sem.Err)
	case errors.As(err, &sem):
		f := jsonField(t, sem.JSONPointer)
		return fmt.Errorf("line %d: %s must be %s, got a JSON %s", line(b, sem.ByteOffset), f.subject(), f.want(sem.GoType), jsonKind(sem.JSONKind))
	}
	return fmt.Errorf("malformed JSON: %w", err)
}

// line is the line of b that byte offset off is on, from 1.
func line(b []byte, off int64) int {
	return 1 + bytes.Count(b[:min(max(off, 0), int64(len(b)))], []byte("\n"))
}

// field is a place in a policy file: its path and what it takes.
type field struct {
	path   string // policies.api.limits[0]; "" for the top level
	expect string // the field's expect tag, "" if none
}

// want says what the field takes: its expect tag, or the words of its
// Go type t.
func (f field) want(t reflect.Type) string {
	if f.expect != "" {
		return f.expect
	}
	return jsonWant(t)
}

func (f field) subject() string {
	if f.path == "" {
		return "the top level"
	}
	return f.path
}

// jsonField follows the JSON pointer p from the top level of type t to the
// field it points at: its path written as the YAML file's errors write it
// (a list's items as [i]), and its expect tag.
func jsonField(t reflect.Type, p jsontext.Pointer) field {
	var f field
	for tok := range p.Tokens() {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		kind := reflect.Invalid
		if t != nil {
			kind = t.Kind()
		}
		f.expect = ""
		switch kind {
		case reflect.Slice, reflect.Array:
			f.path += "[" + tok + "]"
			t = t.Elem()
			continue
		case reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			sf, ok := jsonStructField(t, tok)
			t = sf.Type
			if ok {
				f.expect = sf.Tag.Get("expect")
			}
		default:
			t = nil
		}
		if f.path != "" {
			f.path += "."
		}
		f.path += tok
	}
	return f
}

// jsonStructField is struct type t's field of JSON name name, its embedded
// structs' included.
func jsonStructField(t reflect.Type, name string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// jsonFields lists the JSON names of struct type t's fields (its embedded
// structs' included), "" when t is no struct.
func jsonFields(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// jsonWant names the JSON value a Go type takes.
func jsonWant(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another JSON value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct:
		return "a map of the fields " + jsonFields(t) // as the YAML file's errors say
	}
	return "a map"
}

// jsonKind names a JSON value's kind.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}
