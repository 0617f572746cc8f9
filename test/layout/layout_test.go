// Package layout holds the tests of how the module's packages may depend on
// each other.
package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/holdfast-io/holdfast/"

// The components: each is built, shipped and changed on its own, so none
// depends on another's packages. What they share lives below all of them.
var (
	components = []string{"api", "scheduler-plugin", "webhook", "controller", "node-plugin", "runtime", "kubectl-holdfast"}
	// shared are the packages every component may depend on. test/ is the
	// test toolkit, which support packages inside a component (runtimetest,
	// plugintest) use; through it a component still may not reach another
	// component, since the check follows every dependency.
	shared = []string{"api", "policy", "internal", "test"}
)

// top is the module directory a package lives in: "controller" for
// .../controller/units.
func top(pkg string) string {
	first, _, _ := strings.Cut(strings.TrimPrefix(pkg, module), "/")
	return first
}

// A component's packages depend, directly or through any other package, on
// their own component's packages, api/, policy/, internal/ and the test
// toolkit only; policy/ and internal/ on api/, policy/ and internal/ only.
// cmd/ (the mains) and test/ may depend on anything. Test files are not
// followed: a component's tests may drive other components.
func TestComponentsImportOnlySharedPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "integration,e2e",
		"-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", module+"...").Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, msg)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, own := fields[0], top(fields[0])
		var allowed []string
		switch {
		case slices.Contains(components, own):
			allowed = append([]string{own}, shared...)
		case own == "policy" || own == "internal":
			allowed = []string{"api", "policy", "internal"}
		default:
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			if strings.HasPrefix(dep, module) && !slices.Contains(allowed, top(dep)) {
				t.Errorf("%s depends on %s: it may depend only on %s/ (move what both need to policy/ or internal/)",
					strings.TrimPrefix(pkg, module), strings.TrimPrefix(dep, module), strings.Join(allowed, "/, "))
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d packages; go list listed:\n%s", checked, out)
	}
}
