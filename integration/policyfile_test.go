package integration

import (
	"os"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// loadPolicies reads a policy file as the server's -ratelimit-policies does.
func loadPolicies(path string) ([]ratelimit.Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ratelimit.ParsePolicyFile(path, b)
}
