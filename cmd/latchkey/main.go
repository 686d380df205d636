// Command latchkey takes Latchkey locks and rate-limit decisions from the
// shell: `latchkey lock NAME -- COMMAND` runs COMMAND while it holds the
// lock, which makes any cron job safe to run on many machines, and
// `latchkey elect NAME -- COMMAND` runs COMMAND only while it leads the
// election NAME.
//
// Exit statuses (see ExitHeld and the others): COMMAND's own status, or
// 75 when the lock was not acquired (the election not won) in time, 76
// when the lease (leadership) was lost while COMMAND ran, 69 when the
// server could not be used, 2 for a usage error (a name or option the
// server refused as invalid included), 126/127 when COMMAND cannot be run; `check` exits 0 when allowed and 1 when denied.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
