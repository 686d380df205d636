package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
)

// ProblemListener wraps l so that the requests net/http refuses itself,
// before any handler runs, are answered as every other refusal is: a 400
// invalid-request problem+json with a request ID (in X-Request-Id, in the
// body and in a logged "request" line) instead of net/http's text/plain
// "400 Bad Request". net/http reads a request's line and headers before a
// handler exists for it, and refuses there a path with a malformed escape
// (/v1/locks/a%zz), a malformed request line, and a missing, malformed or
// repeated Host header or a malformed header; it offers no hook for that
// answer, so the connection rewrites it on its way out.
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
// could not read, which it replaces with the problem answer. net/http
// writes that refusal in one write, straight to the connection: its
// status line, then exactly refusalHeaders (an answer to a routed request
// never has them so, for it always has a Date header and net/http sorts
// header names, so Connection comes before Content-Type).
func (c *problemConn) Write(p []byte) (int, error) {
	fe, ok := netHTTPRefusal(p)
	if !ok {
		return c.Conn.Write(p)
	}
	id := newRequestID()
	row := problemTypes[invalidRequest]
	body, _ := json.Marshal(Problem{Type: row.typ, Title: row.title, Status: row.status, Detail: fe.Detail,
		RequestID: id, Errors: []FieldError{fe}})
	body = append(body, '\n')
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 400 Bad Request\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: ")
	b.WriteString(strconv.Itoa(len(body)))
	b.WriteString("\r\nContent-Type: application/problem+json\r\n" + requestIDHeader + ": ")
	b.WriteString(id)
	b.WriteString("\r\n\r\n")
	b.Write(body)
	if _, err := c.Conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	c.log.Info("request", slog.String("request_id", id), slog.String("method", ""),
		slog.String("route", unmatchedRoute), slog.Int("status", row.status), slog.Int("bytes", len(body)),
		slog.String("refused", fe.Detail))
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
// itself (see net/http's conn.serve).
const refusalHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

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

// netHTTPRefusal reports whether p is a 400 net/http wrote itself, and
// what it refused.
func netHTTPRefusal(p []byte) (FieldError, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 400 Bad Request"))
	if !ok {
		return FieldError{}, false
	}
	var text string
	if after, ok := bytes.CutPrefix(rest, []byte(": ")); ok {
		i := bytes.IndexByte(after, '\r')
		if i < 0 {
			return FieldError{}, false
		}
		text, rest = string(after[:i]), after[i:]
	}
	if !bytes.HasPrefix(rest, []byte(refusalHeaders)) {
		return FieldError{}, false
	}
	fe, ok := netHTTPRefusals[text]
	if !ok {
		fe = FieldError{Field: "request", Rule: "format", Detail: "the request could not be read: " + text}
	}
	return fe, true
}
