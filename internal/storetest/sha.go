package storetest

import (
	"crypto/sha1"
	"encoding/hex"
)

// ScriptSHA is the SHA1 digest by which Redis knows the script src
// (EVALSHA).
func ScriptSHA(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}
