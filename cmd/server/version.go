package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the release, set at build time with
// -ldflags "-X main.version=v1.2.3"; without it the module version and VCS
// revision Go recorded in the binary are shown.
var version = ""

// versionString is what -version prints, e.g.
// "latchkey v1.2.3 (commit 0123abcd4567, modified) go1.26.8 linux/amd64".
func versionString() string {
	v, rev, modified := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	out := "latchkey " + v
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev != "" && modified:
		out += " (commit " + rev + ", modified)"
	case rev != "":
		out += " (commit " + rev + ")"
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
