package locks

import "time"

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

// rwAcquireArgs is rw_acquire.lua's ARGV: acquire.lua's, then the mode.
func rwAcquireArgs(cfg Config, req AcquireRequest, name string, waiterTimeout time.Duration, keepTTL bool) []any {
	return append(acquireArgs(cfg, kindRW, req, name, waiterTimeout, keepTTL, 1),
		modeArg(req.Mode), // ARGV[13] mode: "r" or "w"
	)
}

// rwReleaseArgs is rw_release.lua's ARGV.
func rwReleaseArgs(cfg Config, name, token string, mode RWMode) []any {
	return []any{
		token,                       // ARGV[1] token
		modeArg(mode),               // ARGV[2] mode: "r", "w", "" for the token's write lease, else its read lease
		kindRW.member(token, name),  // ARGV[3] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[4] fence retention, ms
	}
}

// rwRenewArgs is rw_renew.lua's ARGV: renew.lua's, then the mode. A ttl of
// 0 renews for each lease's own TTL.
func rwRenewArgs(cfg Config, name, token string, mode RWMode, ttl time.Duration) []any {
	return append(renewArgs(cfg, kindRW, name, token, ttl, 1),
		modeArg(mode), // ARGV[6] mode: "r", "w", "" for every lease of the token
	)
}
