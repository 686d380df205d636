package handlers_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
)

// checkBodies are check bodies of every shape: the usual ones, which the
// hand-written reader takes, and ones it must leave to the generic decoder
// (malformed, unknown or repeated members, escapes, non-ASCII, null,
// numbers it does not read, values the validator refuses).
var checkBodies = []struct {
	body string
	fast bool // the hand-written reader takes it
}{
	{`{"policy":"api","key":"user-1"}`, true},
	{`{"policy":"api"}`, true},
	{`{}`, true},
	{" \t\r\n{ \"policy\" : \"api\" , \"key\" : \"k\" } \n", true},
	{`{"key":"user-1","limit":10,"window":"1m","algorithm":"sliding_window","burst":5,"cost":-2,"peek":true}`, true},
	{`{"key":"k","limit":0,"window":"10s","algorithm":"token_bucket","cost":0,"peek":false}`, true},
	{`{"key":"k","limit":-0,"window":"1h30m","algorithm":"fixed_window"}`, true},
	{`{"key":"k","limit":999999999999999999,"window":"1ns"}`, true},
	{`{"policy":"a/b:c.d-e_f <&> ~"}`, true},
	{`{"policy":""}`, true},

	{``, false},
	{` `, false},
	{`null`, false},
	{`[]`, false},
	{`"policy"`, false},
	{`{`, false},
	{`{"policy":"api"`, false},
	{`{"policy":"api",}`, false},
	{`{"policy":"api"}{}`, false},
	{`{"policy":"api"} x`, false},
	{`{"policy":"api","policy":"web"}`, false},
	{`{"Policy":"api"}`, false},
	{`{"policy":"api","extra":1}`, false},
	{`{"policy":null}`, false},
	{`{"policy":1}`, false},
	{`{"policy":"a\"b"}`, false},
	{`{"policy":"a\u0062"}`, false},
	{`{"po\u006cicy":"api"}`, false},
	{"{\"policy\":\"caf\u00e9\"}", false},
	{"{\"policy\":\"a\x01b\"}", false},
	{"{\"policy\":\"a\xffb\"}", false},
	{`{"limit":1.5}`, false},
	{`{"limit":1.0}`, false},
	{`{"limit":1e3}`, false},
	{`{"limit":01}`, false},
	{`{"limit":-}`, false},
	{`{"limit":+1}`, false},
	{`{"limit":9223372036854775807}`, false},
	{`{"limit":99999999999999999999}`, false},
	{`{"limit":"10"}`, false},
	{`{"limit":null}`, false},
	{`{"window":"0s"}`, false},
	{`{"window":"-1s"}`, false},
	{`{"window":"soon"}`, false},
	{`{"window":""}`, false},
	{`{"window":null}`, false},
	{`{"algorithm":"leaky_bucket"}`, false},
	{`{"algorithm":""}`, false},
	{`{"algorithm":"Fixed_Window"}`, false},
	{`{"peek":1}`, false},
	{`{"peek":"true"}`, false},
	{`{"peek":tru}`, false},
	{`{"peek":truex}`, false},
	{`{"peek":null}`, false},
	{`{"cost":5,"cost":6}`, false},
}

// TestCheckBodyFastPathMatchesDecoder: the hand-written reader of the check
// body takes the usual bodies and reads them as the generic decoder and
// validator do; every other body it leaves to them (so a refusal is theirs,
// with their type, field and words).
func TestCheckBodyFastPathMatchesDecoder(t *testing.T) {
	for _, tt := range checkBodies {
		got, took := handlers.ParseCheckBody(tt.body)
		if took != tt.fast {
			t.Errorf("%q: hand-written reader took it = %v, want %v", tt.body, took, tt.fast)
		}
		if !took {
			continue
		}
		want, err := handlers.DecodeCheckBodyGeneric(tt.body)
		if err != nil {
			t.Errorf("%q: the hand-written reader took a body the decoder refuses: %v", tt.body, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q: the hand-written reader reads it otherwise than the decoder (-decoder +reader):\n%s", tt.body, diff)
		}
	}
}

// FuzzCheckBody: whatever the body, the hand-written reader either leaves
// it to the generic decoder or reads exactly what the decoder reads.
func FuzzCheckBody(f *testing.F) {
	for _, tt := range checkBodies {
		f.Add(tt.body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got, took := handlers.ParseCheckBody(body)
		if !took {
			return
		}
		want, err := handlers.DecodeCheckBodyGeneric(body)
		if err != nil {
			t.Fatalf("%q: taken by the hand-written reader, refused by the decoder: %v", body, err)
		}
		if got != want {
			t.Fatalf("%q: reader %s, decoder %s", body, got, want)
		}
	})
}

// TestCheckBodyFieldsAreTheRequests: the hand-written reader knows exactly
// the check body's fields, by their JSON names.
func TestCheckBodyFieldsAreTheRequests(t *testing.T) {
	got, want := handlers.CheckBodyFields(), handlers.CheckRequestFields()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hand-written reader's fields (-checkRequest +reader):\n%s", diff)
	}
}
