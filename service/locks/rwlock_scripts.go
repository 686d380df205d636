package locks

import (
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// The read/write lock's scripts: each is rw_lib.lua followed by its own file.
var (
	rwAcquireScript      = store.NewScript("rw_acquire", lua.RWLib+lua.RWAcquire)
	rwReleaseScript      = store.NewScript("rw_release", lua.RWLib+lua.RWRelease)
	rwRenewScript        = store.NewScript("rw_renew", lua.RWLib+lua.RWRenew)
	rwInspectScript      = store.NewScript("rw_inspect", lua.RWLib+lua.RWInspect)
	rwForceReleaseScript = store.NewScript("rw_force_release", lua.RWLib+lua.RWForceRelease)
	rwLeaveScript        = store.NewScript("rw_leave", lua.RWLib+lua.RWLeave)
	rwRenewBatchScript   = store.NewScript("rw_renew_batch", lua.RWLib+lua.RWRenewBatch)
)

// rwScripts lists the read/write lock's scripts.
var rwScripts = []*store.Script{rwAcquireScript, rwReleaseScript, rwRenewScript, rwInspectScript,
	rwForceReleaseScript, rwLeaveScript, rwRenewBatchScript}

// Status of rw_acquire.lua's reply besides acquire.lua's.
const rwUpgradeRefused = -4 // the token holds the read lease and asked for write

// modeArg is a mode as the scripts take it: "r", "w", or "" for any.
func modeArg(m RWMode) string {
	switch m {
	case ModeRead:
		return "r"
	case ModeWrite:
		return "w"
	}
	return ""
}

// modeOf reads the mode field of a script's reply: 1 read, 2 write.
func modeOf(v int64) RWMode {
	switch v {
	case 1:
		return ModeRead
	case 2:
		return ModeWrite
	}
	return ""
}

// rwAcquireArgs is rw_acquire.lua's ARGV.
func rwAcquireArgs(cfg Config, req AcquireRequest, name string, waiterTimeout time.Duration, keepTTL bool) []any {
	return []any{
		req.Token,                      // ARGV[1] token
		req.TTL.Milliseconds(),         // ARGV[2] lease TTL, ms
		cfg.FenceTTL.Milliseconds(),    // ARGV[3] fence retention, ms
		flag(req.Fair),                 // ARGV[4] fairness: "1" fair, "0" plain
		waiterTimeout.Milliseconds(),   // ARGV[5] waiter timeout, ms (0: register nothing)
		flag(req.Keepalive),            // ARGV[6] "1" to keep the lease alive
		req.MaxHold.Milliseconds(),     // ARGV[7] keep-alive max hold, ms
		req.Heartbeat.Milliseconds(),   // ARGV[8] keep-alive heartbeat interval, ms (0: none)
		kindRW.member(req.Token, name), // ARGV[9] keep-alive registry member
		cfg.LostTTL.Milliseconds(),     // ARGV[10] lost-lease reasons' retention, ms
		flag(keepTTL),                  // ARGV[11] "1": a re-entry keeps the lease's own TTL
		req.Owner,                      // ARGV[12] owner text of a new grant, "" for none
		modeArg(req.Mode),              // ARGV[13] mode: "r" or "w"
	}
}

// rwReleaseArgs is rw_release.lua's ARGV.
func rwReleaseArgs(name, token string, mode RWMode) []any {
	return []any{
		token,                      // ARGV[1] token
		modeArg(mode),              // ARGV[2] mode: "r", "w", "" for the token's write lease, else its read lease
		kindRW.member(token, name), // ARGV[3] keep-alive registry member
	}
}

// rwRenewArgs is rw_renew.lua's ARGV. A ttl of 0 renews for each lease's own TTL.
func rwRenewArgs(cfg Config, name, token string, mode RWMode, ttl time.Duration) []any {
	return []any{
		token,                       // ARGV[1] token
		ttl.Milliseconds(),          // ARGV[2] new lease TTL, ms (0: each lease's own)
		cfg.LostTTL.Milliseconds(),  // ARGV[3] lost-lease reasons' retention, ms
		kindRW.member(token, name),  // ARGV[4] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[5] fence retention, ms
		modeArg(mode),               // ARGV[6] mode: "r", "w", "" for every lease of the token
	}
}

// rwInspectArgs is rw_inspect.lua's ARGV. An empty token asks about none.
func rwInspectArgs(name, token string) []any {
	member := ""
	if token != "" {
		member = kindRW.member(token, name)
	}
	return []any{
		token,  // ARGV[1] token to look up, or ""
		member, // ARGV[2] the token's keep-alive registry member, or ""
	}
}

// rwForceReleaseArgs is rw_force_release.lua's ARGV.
func rwForceReleaseArgs(cfg Config, name string) []any {
	return []any{
		cfg.FenceTTL.Milliseconds(), // ARGV[1] fence retention, ms
		cfg.LostTTL.Milliseconds(),  // ARGV[2] lost-lease reasons' retention, ms
		name,                        // ARGV[3] lock name
	}
}
