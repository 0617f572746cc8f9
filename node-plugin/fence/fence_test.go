package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

type units map[string]*holdfastv1.Unit

func (u units) Unit(_ context.Context, ns, name string) (*holdfastv1.Unit, bool) {
	x, ok := u[ns+"/"+name]
	return x, ok
}

// TestStopFailureLeavesSandboxAndRetries covers the error path real
// containerd cannot be made to produce: a StopContainer that fails. The
// sandbox is not removed (its container may still write), nothing is
// audited as done, and the next pass stops it.
func TestStopFailureLeavesSandboxAndRetries(t *testing.T) {
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "u-runtime-e1", Namespace: "plant"},
		Labels: map[string]string{holdfastv1.LabelUnit: "u", holdfastv1.LabelEpoch: "1",
			"io.kubernetes.pod.namespace": "plant", "io.kubernetes.pod.name": "u-runtime-e1"}}}})
	cri.SetFakeContainers([]*critesting.FakeContainer{{SandboxID: "sb1", ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Metadata: &runtimeapi.ContainerMetadata{Name: "runtime"}}}})
	u := &holdfastv1.Unit{Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 2}}}
	agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: t.TempDir()}

	cri.InjectError("StopContainer", errors.New("rpc error: code = Unavailable"))
	if _, err := agent.FenceStale(context.Background(), "", ""); err == nil {
		t.Fatal("a failed stop was not reported")
	}
	for _, c := range cri.GetCalls() {
		if c == "StopPodSandbox" || c == "RemovePodSandbox" {
			t.Fatalf("sandbox stopped or removed after its container failed to stop: %v", cri.GetCalls())
		}
	}
	if agent.Pending() != 0 {
		t.Fatal("a failed stop was recorded as an action")
	}
	acts, err := agent.FenceStale(context.Background(), "", "")
	if err != nil || len(acts) != 1 || acts[0].Containers[0] != "c1" {
		t.Fatalf("retry: %v %+v", err, acts)
	}
	if sbs, _ := cri.ListPodSandbox(context.Background(), nil); len(sbs) != 0 {
		t.Fatalf("sandbox left after the retry: %v", sbs)
	}
}
