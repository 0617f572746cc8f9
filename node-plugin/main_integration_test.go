//go:build integration

package nodeplugin_test

import (
	"os"
	"testing"

	"github.com/holdfast-io/holdfast/node-plugin/hoststate"
	"github.com/holdfast-io/holdfast/test/testenv"
)

// env is the real control plane, started once for every node-plugin
// integration test (role actuator with real etcd, fence agent and
// pre-staging on real containerd, reporter).
var env *testenv.Env

// TestMain also lets the test binary stand in for `holdfast-node role-is`
// in the units' ExecCondition lines (the same function the real binary
// runs).
func TestMain(m *testing.M) {
	if os.Getenv("HOLDFAST_TEST_ROLE_IS") == "1" {
		os.Exit(hoststate.RoleIsMain(os.Args[2:], os.Stderr))
	}
	os.Setenv("HOLDFAST_TEST_ROLE_IS", "1")
	testenv.Main(m, &env, testenv.Options{})
}
