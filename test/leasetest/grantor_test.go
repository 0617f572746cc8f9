package leasetest

import (
	"os/exec"
	"strings"
	"testing"
)

// The runtime's binary must never carry controller code: this package
// imports controller/grantor so the tests speak the one protocol, and only
// tests may import this package.
func TestTheRuntimeBinaryDoesNotImportTheController(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/holdfast-io/holdfast/cmd/unit-runtime").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %s", len(deps), out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/holdfast-io/holdfast/controller/") || p == "github.com/holdfast-io/holdfast/test/leasetest" {
			t.Errorf("cmd/unit-runtime depends on %s", p)
		}
	}
}
