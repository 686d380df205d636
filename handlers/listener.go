package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
)

// ProblemListener wraps l so that the requests net/http refuses itself,
// before any handler runs, are answered as every other refusal is:
// problem+json with a request ID (in X-Request-Id, in the body and in a
// logged "request" line) instead of net/http's text/plain or empty answer.
// net/http reads a request's line and headers before a handler exists for
// it, and refuses there, with a 400, a path with a malformed escape
// (/v1/locks/a%zz), a malformed request line, and a missing, malformed or
// repeated Host header or a malformed header; with a 431, a request line
// and headers over its limit; with a 505, an HTTP version other than 1.x;
// with a 501, a transfer coding other than chunked; and with a 417, an
// Expect other than 100-continue. It offers no hook for those answers, so
// the connection rewrites them on their way out.
//
// Use it on plain HTTP only: on TLS, net/http writes its refusal through
// the TLS connection, out of this listener's sight (and HTTP/2 resets the
// stream instead). log receives the refusals' lines; nil discards them.
func ProblemListener(l net.Listener, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &problemListener{Listener: l, log: log}
}

type problemListener struct {
	net.Listener
	log *slog.Logger
}

func (l *problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c, log: l.log}, nil
}

// problemConn is a connection whose net/http refusal is rewritten.
type problemConn struct {
	net.Conn
	log *slog.Logger
}

// Write passes p on, unless it is net/http's own refusal of a request it
// could not read or would not serve, which it replaces with the problem
// answer. net/http writes each such refusal in one write, straight to the
// connection (see netHTTPRefusal).
func (c *problemConn) Write(p []byte) (int, error) {
	ref, ok := netHTTPRefusal(p)
	if !ok {
		return c.Conn.Write(p)
	}
	id := newRequestID()
	row := problemTypes[ref.typ]
	body, _ := json.Marshal(Problem{Type: row.typ, Title: row.title, Status: row.status, Detail: ref.fe.Detail,
		RequestID: id, Errors: []FieldError{ref.fe}})
	body = append(body, '\n')
	var b bytes.Buffer
	b.WriteString(ref.proto + " " + strconv.Itoa(row.status) + " " + http.StatusText(row.status))
	b.WriteString("\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: ")
	b.WriteString(strconv.Itoa(len(body)))
	b.WriteString("\r\nContent-Type: application/problem+json\r\n" + requestIDHeader + ": ")
	b.WriteString(id)
	b.WriteString("\r\n\r\n")
	b.Write(body)
	// The line is logged before the answer goes out, so whoever has read
	// the answer finds its line.
	c.log.Info("request", slog.String("request_id", id), slog.String("method", ""),
		slog.String("route", unmatchedRoute), slog.Int("status", row.status), slog.Int("bytes", len(body)),
		slog.String("refused", ref.fe.Detail))
	if _, err := c.Conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite half-closes the connection, as net/http does before it closes
// one it refused, when the wrapped connection can.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// refusalHeaders follow the status line of every refusal net/http writes
// itself from its connection loop (see net/http's conn.serve), before the
// body: an answer to a routed request never has them so, for it always has
// a Date header and net/http sorts header names, so Connection comes
// before Content-Type.
const refusalHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// refusal is what a net/http refusal is answered with: the problem type,
// the field at fault, and the HTTP version of the status line.
type refusal struct {
	typ   problemType
	fe    FieldError
	proto string
}

// netHTTPRefusals name what is wrong in each 400 net/http writes itself:
// by the text after "400 Bad Request: ". Its bare 400 says nothing: it
// answers so a request line it could not parse (a malformed escape in the
// path, method or version), a header line it could not parse, a second
// Host header, and Content-Length headers that disagree or do not parse,
// so that one names the request and every cause it may be.
var netHTTPRefusals = map[string]FieldError{
	"": {Field: "request", Rule: "format",
		Detail: "the request could not be read: its request line or a header is malformed (a '%' in the path must start an escape of two hex digits, %25 for '%' itself; the method, HTTP version and header lines must be well-formed; Host must be sent once; Content-Length must be one decimal number)"},
	"missing required Host header": {Field: "Host", Rule: "required", Detail: "the Host header is required"},
	"malformed Host header":        {Field: "Host", Rule: "format", Detail: "the Host header is malformed"},
	"invalid header name":          {Field: "header", Rule: "format", Detail: "a header name is malformed"},
	"invalid header value":         {Field: "header", Rule: "format", Detail: "a header value is malformed"},
}

// maxHeadBytes is how many bytes of request line and headers net/http
// reads before it answers 431: the server's MaxHeaderBytes, left at its
// default, and the 4 KiB net/http allows beyond it.
const maxHeadBytes = http.DefaultMaxHeaderBytes + 4096

// netHTTPOtherRefusals are the refusals other than 400 net/http writes
// itself from its connection loop, each always the same bytes, and what
// each is answered with.
var netHTTPOtherRefusals = []struct {
	answer string
	ref    refusal
}{
	{"HTTP/1.1 431 Request Header Fields Too Large" + refusalHeaders + "431 Request Header Fields Too Large",
		refusal{headersTooLarge, FieldError{Field: "header", Rule: "max",
			Detail: "the request line and headers must be at most " + strconv.Itoa(maxHeadBytes) + " bytes together (1 MiB and 4 KiB)"}, "HTTP/1.1"}},
	{"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version" + refusalHeaders +
		"505 HTTP Version Not Supported: unsupported protocol version",
		refusal{httpVersionNotSupported, FieldError{Field: "HTTP-version", Rule: "oneof",
			Detail: "the HTTP version must be HTTP/1.1 or HTTP/1.0"}, "HTTP/1.1"}},
	{"HTTP/1.1 501 Not Implemented" + refusalHeaders + "Unsupported transfer encoding",
		refusal{transferCodingNotSupported, FieldError{Field: "Transfer-Encoding", Rule: "oneof",
			Detail: "Transfer-Encoding must be chunked alone, the only transfer coding the server decodes (or be left out, with Content-Length)"}, "HTTP/1.1"}},
}

// expectationFailedHeaders follow the status line of the 417 net/http
// writes itself, before it calls a handler, to an Expect other than
// 100-continue (see net/http's response.sendExpectationFailed): no handler
// answers 417, and every answer of one has X-Request-Id.
const (
	expectationFailedHeaders = " 417 Expectation Failed\r\nConnection: close\r\nDate: "
	expectationFailedEnd     = "\r\nContent-Length: 0\r\n\r\n"
)

// netHTTPRefusal reports whether p is an answer net/http wrote itself, not
// a handler, and what it refused.
func netHTTPRefusal(p []byte) (refusal, bool) {
	// Every answer passes here: one whose status line is not one of a
	// refusal's goes on after a look at its first 12 bytes.
	if len(p) < 12 || string(p[:7]) != "HTTP/1." || p[8] != ' ' {
		return refusal{}, false
	}
	switch string(p[9:12]) {
	case "400", "417", "431", "501", "505":
	default:
		return refusal{}, false
	}
	for _, r := range netHTTPOtherRefusals {
		if string(p) == r.answer {
			return r.ref, true
		}
	}
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		if len(p) == len(proto)+len(expectationFailedHeaders)+len(http.TimeFormat)+len(expectationFailedEnd) &&
			string(p[:len(proto)]) == proto && string(p[len(proto):len(proto)+len(expectationFailedHeaders)]) == expectationFailedHeaders &&
			bytes.HasSuffix(p, []byte(expectationFailedEnd)) {
			return refusal{expectationFailed, FieldError{Field: "Expect", Rule: "oneof",
				Detail: "Expect must be 100-continue, the only expectation the server meets (or be left out)"}, proto}, true
		}
	}
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 400 Bad Request"))
	if !ok {
		return refusal{}, false
	}
	var text string
	if after, ok := bytes.CutPrefix(rest, []byte(": ")); ok {
		i := bytes.IndexByte(after, '\r')
		if i < 0 {
			return refusal{}, false
		}
		text, rest = string(after[:i]), after[i:]
	}
	if !bytes.HasPrefix(rest, []byte(refusalHeaders)) {
		return refusal{}, false
	}
	fe, ok := netHTTPRefusals[text]
	if !ok {
		fe = FieldError{Field: "request", Rule: "format", Detail: "the request could not be read: " + text}
	}
	return refusal{invalidRequest, fe, "HTTP/1.1"}, true
}
