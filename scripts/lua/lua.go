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
