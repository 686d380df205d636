// Package integration drives Latchkey end to end over HTTP against a real
// Redis. See redis_test.go for how the tests find one.
package integration

import (
	"os"
	"testing"
)

// containerDefaults are testcontainers-go settings this suite needs unless
// the environment says otherwise:
//   - no reaper: its image cannot be pulled where there is no registry, and
//     every test registers its own container cleanup;
//   - published ports are reached on 127.0.0.1: inside a container
//     testcontainers would otherwise dial the default gateway, which is not
//     where a local engine publishes them.
var containerDefaults = map[string]string{
	"TESTCONTAINERS_RYUK_DISABLED": "true",
	"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
}

func TestMain(m *testing.M) {
	for k, v := range containerDefaults {
		if _, ok := os.LookupEnv(k); !ok {
			_ = os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}
