package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
)

// newValidator returns the one validator of a router, with JSON field names
// and the duration rules registered before first use.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	must := func(err error) {
		if err != nil {
			panic(err) // only on a programming error in the tag registration below
		}
	}
	must(v.RegisterValidation("duration", func(fl validator.FieldLevel) bool {
		d, err := time.ParseDuration(fl.Field().String())
		return err == nil && d >= 0
	}))
	must(v.RegisterValidation("posduration", func(fl validator.FieldLevel) bool {
		d, err := time.ParseDuration(fl.Field().String())
		return err == nil && d > 0
	}))
	return v
}

// validationDetail turns one validator failure into a sentence.
func validationDetail(fe validator.FieldError) string {
	switch fe.Tag() {
	case "posduration":
		return fmt.Sprintf("%s must be a positive duration such as \"30s\" or \"1500ms\", got %q", fe.Field(), fe.Value())
	case "duration":
		return fmt.Sprintf("%s must be a duration such as \"0s\", \"5s\" or \"1500ms\", got %q", fe.Field(), fe.Value())
	case "required":
		return fe.Field() + " is required"
	case "oneof":
		return fmt.Sprintf("%s must be one of: %s", fe.Field(), fe.Param())
	case "min", "gte", "gt":
		return fmt.Sprintf("%s must be at least %s", fe.Field(), fe.Param())
	case "max", "lte", "lt":
		return fmt.Sprintf("%s must be at most %s", fe.Field(), fe.Param())
	}
	return fmt.Sprintf("%s fails the %q rule", fe.Field(), fe.Tag())
}

// decodeJSON reads an optional JSON body into dst and validates it. An empty
// body leaves dst as it is. The body is bounded by maxBytes; it must be
// application/json, hold exactly one object with known fields only.
func (a *api) decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		return badRequest("body", "readable", "could not read the request body: "+err.Error())
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return a.validate.StructCtx(r.Context(), dst)
	}
	if err := checkJSONMediaType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("body", "single-object", "request body must hold a single JSON object with nothing after it")
	}
	return a.validate.StructCtx(r.Context(), dst)
}

func checkJSONMediaType(ct string) error {
	if ct == "application/json" {
		return nil // what nearly every client sends: no parse needed
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return &httpError{status: http.StatusUnsupportedMediaType, typ: "unsupported-media",
		detail: "request body must be application/json, got Content-Type " + ct}
}

// jsonError names what is wrong with a body the JSON decoder refused.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("body", "json", fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body", "json", "malformed JSON: the body ends too early")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return badRequest("body", "json", "request body must be a JSON object")
		}
		return badRequest(field, "type", fmt.Sprintf("%s must be a JSON %s, got %s", field, jsonKind(typ.Type), typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest(field, "unknown", fmt.Sprintf("unknown field %q", field))
	}
	return badRequest("body", "json", "malformed JSON: "+err.Error())
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64, reflect.Uint, reflect.Uint64:
		return "number"
	}
	return t.String()
}

// parseDuration parses a duration field that the validator already checked;
// empty gives zero.
func parseDuration(s string) time.Duration {
	if s == "" {
		return 0
	}
	d, _ := time.ParseDuration(s)
	return d
}

// Header values shared by every JSON answer, set without canonicalizing
// their names or allocating a slice per request; net/http only reads them.
var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// writeJSON answers v as JSON with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONHeader(w, status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSONHeader sends the status and the headers of every JSON answer.
func writeJSONHeader(w http.ResponseWriter, status int) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
}
