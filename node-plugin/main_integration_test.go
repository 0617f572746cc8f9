//go:build integration

package nodeplugin_test

import (
	"os"
	"testing"

	nodeplugin "github.com/holdfast-io/holdfast/node-plugin"
	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/testenv"
)

// env is the real control plane, started once for every node-plugin
// integration test (role actuator with real etcd, fence agent and
// pre-staging on real containerd, reporter).
var env *testenv.Env

// TestMain also lets the test binary stand in for `holdfast-node role-is`
// and `holdfast-node start-condition` in the units' ExecCondition lines
// (the same functions the real binary runs; the node plugin copies the test
// binary to the host as its own).
func TestMain(m *testing.M) {
	if os.Getenv("HOLDFAST_TEST_ROLE_IS") == "1" {
		if len(os.Args) > 1 && os.Args[1] == nodeplugin.StartConditionCommand {
			os.Exit(nodeplugin.StartConditionMain(os.Args[2:], os.Stderr))
		}
		os.Exit(hoststate.RoleIsMain(os.Args[2:], os.Stderr))
	}
	os.Setenv("HOLDFAST_TEST_ROLE_IS", "1")
	testenv.Main(m, &env, testenv.Options{})
}
