package handlers

import "net/http"

// readyResponse is the body of /readyz.
type readyResponse struct {
	Status string `json:"status"`
	Store  string `json:"store"`
	Detail string `json:"detail,omitempty"`
}

// handleHealthz implements operationId getHealth: the process is alive.
func (a *api) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz implements operationId getReadiness: the store answers and
// runs Latchkey's scripts.
func (a *api) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if err := a.svc.Ready(r.Context()); err != nil {
		a.log.Warn("not ready", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, readyResponse{Status: "unavailable", Store: a.cfg.Store,
			Detail: "the store does not answer or cannot run scripts"})
		return
	}
	writeJSON(w, http.StatusOK, readyResponse{Status: "ready", Store: a.cfg.Store})
}
