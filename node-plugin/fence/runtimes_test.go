package fence_test

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// The host's runtimes as the node plugin lists them (L11/L13): a runtime
// pod runs while its sandbox is ready or any of its containers has not
// exited, whatever its Pod object; only a sandbox with every container
// exited, or one holdfast did not make (no epoch), is left out. The
// fixture is one ready runtime sandbox with a running container; each
// mutation changes one thing of it (a not-ready sandbox with a running
// container is a state real containerd is not driven into here).
func TestTheNodeListsEveryRuntimeThatMayStillRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*critesting.FakePodSandbox, *critesting.FakeContainer)
		listed bool
	}{
		{"the fixture: ready, running", func(*critesting.FakePodSandbox, *critesting.FakeContainer) {}, true},
		{"ready, its container exited between two starts", func(_ *critesting.FakePodSandbox, c *critesting.FakeContainer) {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		}, true},
		{"not ready, its container still running", func(sb *critesting.FakePodSandbox, _ *critesting.FakeContainer) {
			sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		}, true},
		{"not ready, its container in an unknown state", func(sb *critesting.FakePodSandbox, c *critesting.FakeContainer) {
			sb.State, c.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY, runtimeapi.ContainerState_CONTAINER_UNKNOWN
		}, true},
		{"not ready, its container exited", func(sb *critesting.FakePodSandbox, c *critesting.FakeContainer) {
			sb.State, c.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY, runtimeapi.ContainerState_CONTAINER_EXITED
		}, false},
		{"no epoch label: not a runtime holdfast made", func(sb *critesting.FakePodSandbox, _ *critesting.FakeContainer) {
			delete(sb.Labels, holdfastv1.LabelEpoch)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, c := runtimeSandbox("sb1"), runtimeContainer("sb1", "c1")
			sb.Labels["io.kubernetes.pod.uid"] = "uid-1"
			tc.mutate(sb, c)
			cri := critesting.NewFakeRuntimeService()
			cri.SetFakeSandboxes([]*critesting.FakePodSandbox{sb})
			cri.SetFakeContainers([]*critesting.FakeContainer{c})
			got, err := (&fence.Agent{CRI: cri}).Runtimes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := holdfastv1.NodeRuntime{Namespace: "plant", Unit: "u", Epoch: 1, Pod: "u-runtime-e1", PodUID: "uid-1"}
			if listed := len(got) == 1 && got[0] == want; listed != tc.listed || (!tc.listed && len(got) != 0) {
				t.Fatalf("listed %+v, want listed %v", got, tc.listed)
			}
		})
	}
}
