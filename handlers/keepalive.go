package handlers

import (
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// keepaliveResponse describes the keep-alive of a lease the service renews.
type keepaliveResponse struct {
	MaxHoldUntil time.Time  `json:"max_hold_until"`
	HeartbeatMS  int64      `json:"heartbeat_ms,omitempty"`
	HeartbeatDue *time.Time `json:"heartbeat_due,omitempty"`
}

func toKeepaliveResponse(ka *locks.Keepalive) *keepaliveResponse {
	if ka == nil {
		return nil
	}
	resp := &keepaliveResponse{MaxHoldUntil: ka.Until, HeartbeatMS: ka.Heartbeat.Milliseconds()}
	if !ka.HeartbeatDue.IsZero() {
		resp.HeartbeatDue = &ka.HeartbeatDue
	}
	return resp
}
