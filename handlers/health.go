package handlers

import (
	"errors"
	"net/http"

	"github.com/latchkey/latchkey/service/store"
)

// readyResponse is the body of /readyz.
type readyResponse struct {
	Status   string         `json:"status"`
	Store    string         `json:"store"`
	Detail   string         `json:"detail,omitempty"`
	Replicas *readyReplicas `json:"replicas,omitempty"`
}

// readyReplicas says, when a primary has fewer replicas than
// -redis-min-replicas requires, how many it has.
type readyReplicas struct {
	Connected int    `json:"connected"`
	Required  int    `json:"required"`
	Primary   string `json:"primary,omitempty"`
}

// handleHealthz implements operationId getHealth: the process is alive.
func (a *api) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz implements operationId getReadiness: the store answers and
// runs Latchkey's scripts, with as many replicas as -redis-min-replicas
// requires.
func (a *api) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if err := a.svc.Ready(r.Context()); err != nil {
		a.log.Warn("not ready", "err", err)
		body := readyResponse{Status: "unavailable", Store: a.cfg.Store,
			Detail: "the store does not answer or cannot run scripts"}
		var short *store.ReplicasError
		if errors.As(err, &short) {
			body.Detail = short.Error()
			body.Replicas = &readyReplicas{Connected: short.Connected, Required: short.Required, Primary: short.Primary}
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, readyResponse{Status: "ready", Store: a.cfg.Store})
}
