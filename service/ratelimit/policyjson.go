package ratelimit

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// unmarshalJSON decodes a policy file's JSON b into v as request bodies are
// decoded: exact member names, unknown members and a member given twice
// refused, nothing after the value. Its errors name the field at fault by
// its path (policies.api.limit) and never a Go type.
func unmarshalJSON(b []byte, v any) error {
	if err := jsonv2.Unmarshal(b, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return jsonFileError(err)
	}
	return nil
}

// jsonFileError says what is wrong with a policy file's JSON, and where.
func jsonFileError(err error) error {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syn):
		return fmt.Errorf("%sfield %q is given twice: give each field once", at(syn.JSONPointer.Parent()), syn.JSONPointer.LastToken())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("malformed JSON: the file ends too early")
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	case errors.Is(err, jsonv2.ErrUnknownName) && errors.As(err, &sem):
		msg := fmt.Sprintf("%sunknown field %q", at(sem.JSONPointer.Parent()), sem.JSONPointer.LastToken())
		if known := jsonFields(sem.GoType); known != "" {
			msg += " (known: " + known + ")"
		}
		return errors.New(msg)
	case errors.As(err, &sem) && sem.Err != nil && !errors.Is(sem.Err, jsonv2.ErrUnknownName):
		return fmt.Errorf("%s%w", at(sem.JSONPointer), sem.Err) // a field's own decoder said why (cost)
	case errors.As(err, &sem):
		return fmt.Errorf("%smust be %s, got a JSON %s", at(sem.JSONPointer), jsonWant(sem.GoType), jsonKind(sem.JSONKind))
	}
	return fmt.Errorf("malformed JSON: %w", err)
}

// at is "policies.api.limit: " for the JSON pointer /policies/api/limit, ""
// for the file's top level.
func at(p jsontext.Pointer) string {
	var names []string
	for tok := range p.Tokens() {
		names = append(names, tok)
	}
	if len(names) == 0 {
		return ""
	}
	return strings.Join(names, ".") + ": "
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
	}
	return "an object"
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
