package handlers

import "net/http"

// handlerFunc is a handler that returns its error instead of answering it
// (chi's _examples/custom-handler): a nil error means it answered.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h to net/http: the one place a handler's error is
// answered, as problem+json (see writeError).
func (a *api) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, r, a.log, err)
		}
	}
}
