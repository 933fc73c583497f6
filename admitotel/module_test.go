package admitotel_test

import (
	"os"
	"strings"
	"testing"
)

// TestModuleGraph: this module's go.mod, which lists every module a user of
// it resolves (its tests' requirements included), names no Redis module:
// the tests that join it with redisbucket live in the integration module.
func TestModuleGraph(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"github.com/admit-go/admit/redisbucket", "github.com/redis/go-redis", "github.com/redis/rueidis"} {
		if strings.Contains(string(mod), path) {
			t.Errorf("go.mod requires %s", path)
		}
	}
}
