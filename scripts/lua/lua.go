// Package lua holds Latchkey's Redis scripts, one file per operation. Each
// file opens with a comment listing its KEYS, ARGV and reply.
//
// Scripts share code: a line "--#include lib/NAME.lua" in a
// script stands for the fragment lib/NAME.lua, which Assemble puts in its
// place when the package is initialised. Redis sees one self-contained
// script.
package lua

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
)

// sources are the scripts and their fragments.
//
//go:embed *.lua lib/*.lua
var sources embed.FS

// Sources returns the script files and their fragments (lib/), as
// written: include lines not yet replaced.
func Sources() fs.FS { return sources }

// includeDirective starts a line that includes a fragment.
const includeDirective = "--#include "

// Assemble returns the script file name (such as "ratelimit_multi.lua")
// with every include line replaced by its fragment. Fragments include
// nothing. Returns an error for a missing file or fragment, or a fragment
// that includes another.
func Assemble(name string) (string, error) {
	src, err := sources.ReadFile(name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for line := range strings.Lines(string(src)) {
		frag, ok := strings.CutPrefix(line, includeDirective)
		if !ok {
			b.WriteString(line)
			continue
		}
		frag = strings.TrimSpace(frag)
		f, err := sources.ReadFile(frag)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		if strings.Contains(string(f), "\n"+includeDirective) || strings.HasPrefix(string(f), includeDirective) {
			return "", fmt.Errorf("%s: fragment %s includes another", name, frag)
		}
		b.Write(f)
	}
	return b.String(), nil
}

// Sharded returns the script src with every wake-up it publishes sent with
// SPUBLISH (Redis 7's sharded pub/sub) instead of PUBLISH: the variant a
// Redis Cluster runs, so a wake-up goes to its channel's slot's node only.
// Every script publishes with the literal call "redis.call('PUBLISH', ",
// on a channel it takes in KEYS (SPUBLISH needs the channel in the
// script's slot).
func Sharded(src string) string {
	return strings.ReplaceAll(src, "redis.call('PUBLISH', ", "redis.call('SPUBLISH', ")
}

// Source returns the script name (the file name without ".lua", such as
// "ratelimit_multi") assembled as Assemble does. It panics when the file or
// a fragment is missing: scripts are declared at package initialisation, so
// every test of the package declaring it fails. Every script is declared
// one way, store.NewScript(name, lua.Source(name)), named as its file.
func Source(name string) string {
	s, err := Assemble(name + ".lua")
	if err != nil {
		panic("lua: " + err.Error())
	}
	return s
}

// mustAssemble is Source for a file name.
func mustAssemble(file string) string { return Source(strings.TrimSuffix(file, ".lua")) }

// Acquire takes a lock lease or re-enters it with the owning token.
//
//go:embed acquire.lua
var Acquire string

// Release drops one hold of a lease and frees the lock on the last one.
//
//go:embed release.lua
var Release string

// Renew extends the TTL of a lease held by a token.
var Renew = mustAssemble("renew.lua")

// Inspect reads the state of a lock without changing it.
//
//go:embed inspect.lua
var Inspect string

// ForceRelease removes a lease whoever holds it and bumps the fence.
//
//go:embed force_release.lua
var ForceRelease string

// Leave removes a waiter that gives up from the waiters and the fair queue.
//
//go:embed leave.lua
var Leave string

// KeepaliveDue lists the keep-alive leases due for renewal.
//
//go:embed keepalive_due.lua
var KeepaliveDue string

// The directory of the keep-alive registry's shards on Redis Cluster.
var (
	// KeepaliveMark marks registry shards due (a grant, a reconciliation).
	KeepaliveMark = mustAssemble("keepalive_mark.lua")
	// KeepaliveClaim hands a renewer the due shards.
	KeepaliveClaim = mustAssemble("keepalive_claim.lua")
	// KeepaliveSettle records when the shards a renewer visited are next due.
	KeepaliveSettle = mustAssemble("keepalive_settle.lua")
)

// RenewBatch renews a batch of keep-alive leases in one call.
var RenewBatch = mustAssemble("renew_batch.lua")

// The read/write lock's scripts, each including lib/rw.lua.
var (
	// RWAcquire takes a read or write lease of a read/write lock, or re-enters it.
	RWAcquire = mustAssemble("rw_acquire.lua")
	// RWRelease drops one hold of a read or write lease.
	RWRelease = mustAssemble("rw_release.lua")
	// RWRenew extends a token's leases of a read/write lock.
	RWRenew = mustAssemble("rw_renew.lua")
	// RWInspect reads the state of a read/write lock without changing it.
	RWInspect = mustAssemble("rw_inspect.lua")
	// RWForceRelease evicts every holder of a read/write lock and bumps its fence.
	RWForceRelease = mustAssemble("rw_force_release.lua")
	// RWLeave removes a waiter of a read/write lock that gives up.
	RWLeave = mustAssemble("rw_leave.lua")
	// RWRenewBatch renews a batch of keep-alive leases of read/write locks.
	RWRenewBatch = mustAssemble("rw_renew_batch.lua")
)

// SemAcquire takes permits of a semaphore as one lease.
//
//go:embed sem_acquire.lua
var SemAcquire string

// SemRelease gives back the permits of a semaphore lease.
//
//go:embed sem_release.lua
var SemRelease string

// SemRenew extends the TTL of a semaphore lease.
var SemRenew = mustAssemble("sem_renew.lua")

// SemInspect reads the state of a semaphore without changing it.
//
//go:embed sem_inspect.lua
var SemInspect string

// SemForceRelease removes every lease of a semaphore and bumps its fence.
//
//go:embed sem_force_release.lua
var SemForceRelease string

// SemSetPermits changes the capacity of a semaphore.
//
//go:embed sem_set_permits.lua
var SemSetPermits string

// SemLeave removes a semaphore waiter that gives up.
//
//go:embed sem_leave.lua
var SemLeave string

// SemRenewBatch renews a batch of keep-alive semaphore leases in one call.
var SemRenewBatch = mustAssemble("sem_renew_batch.lua")

// QuotaTake takes one place of a tenant's lease or waiter quota, or finds
// the one a member has.
//
//go:embed quota_take.lua
var QuotaTake string

// QuotaSet moves the end of a lease's place in its tenant's lease quota.
//
//go:embed quota_set.lua
var QuotaSet string

// QuotaRelease gives back a place of a tenant's lease or waiter quota, or
// every lease's place on a name.
//
//go:embed quota_release.lua
var QuotaRelease string
