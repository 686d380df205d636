package locks

import (
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// The lock scripts. The state changes a client is told about (a grant, a
// release, a renewal, a forced release) run with store.RunReplicated.
var (
	acquireScript      = store.NewScript("acquire", lua.Acquire)
	releaseScript      = store.NewScript("release", lua.Release)
	renewScript        = store.NewScript("renew", lua.Renew)
	inspectScript      = store.NewScript("inspect", lua.Inspect)
	forceReleaseScript = store.NewScript("force_release", lua.ForceRelease)
	leaveScript        = store.NewScript("leave", lua.Leave)
	keepaliveDueScript = store.NewScript("keepalive_due", lua.KeepaliveDue)
	renewBatchScript   = store.NewScript("renew_batch", lua.RenewBatch)
)

// scripts lists every lock script, loaded by store.LoadScripts.
var scripts = []*store.Script{acquireScript, releaseScript, renewScript, inspectScript, forceReleaseScript,
	leaveScript, keepaliveDueScript, renewBatchScript}
