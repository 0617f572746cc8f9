package fence_test

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/fence"
)

// pods are the runtime pods the agent sees from the apiserver.
type pods map[string]map[string]string // namespace/name@uid -> labels

func (p pods) PodLabels(_ context.Context, ns, name, uid string) (map[string]string, bool) {
	l, ok := p[ns+"/"+name+"@"+uid]
	return l, ok
}

// warmSandbox is the sandbox of u's warm standby pod on edge-2: made before
// the pod had an epoch, so it carries none.
func warmSandbox(id string) *critesting.FakePodSandbox {
	name := holdfastv1.WarmPodName("u", "edge-2")
	return &critesting.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "plant", Uid: "warm-uid"},
		Labels: map[string]string{holdfastv1.LabelUnit: "u", holdfastv1.LabelWarmStandby: "edge-2",
			"io.kubernetes.pod.namespace": "plant", "io.kubernetes.pod.name": name, "io.kubernetes.pod.uid": "warm-uid"}}}
}

// L7 for a warm standby: its sandbox never shows an epoch, so its epoch is
// the higher of its pod's current epoch label and the epoch its runtime
// reports; it is stopped, as any runtime, when that is behind its unit's
// binding. One bound to no epoch (Warm) is left running.
func TestAWarmSandboxIsStoppedByTheHigherOfItsPodsLabelAndItsRuntimesEpoch(t *testing.T) {
	warm := &lease.Status{Epoch: 0, Mode: holdfastv1.Failover, State: lease.Warm, Fenced: true}
	bound := func(e int64) *lease.Status {
		return &lease.Status{Epoch: e, Mode: holdfastv1.Failover, State: lease.Ungranted, Fenced: true}
	}
	for _, tc := range []struct {
		name    string
		label   string // the pod's epoch label; "" none
		podUID  string // the pod the apiserver shows; "" none
		reports *lease.Status
		binding int64
		stopped bool
	}{
		{name: "warm, never promoted", podUID: "warm-uid", reports: warm, binding: 5},
		{name: "warm, its pod gone from the apiserver", reports: warm, binding: 5},
		{name: "promoted at 4, not granted yet, binding at 5", label: "4", podUID: "warm-uid", reports: warm, binding: 5, stopped: true},
		{name: "bound to 4 by a grant, its pod not seen, binding at 5", reports: bound(4), binding: 5, stopped: true},
		{name: "bound to 4, its pod labelled 4, binding at 5", label: "4", podUID: "warm-uid", reports: bound(4), binding: 5, stopped: true},
		{name: "promoted at 5, the current binding", label: "5", podUID: "warm-uid", reports: bound(5), binding: 5},
		{name: "bound to 5 by a grant, label not seen yet", podUID: "warm-uid", reports: bound(5), binding: 5},
		{name: "silent, labelled 4, binding at 5", label: "4", podUID: "warm-uid", binding: 5, stopped: true},
		{name: "a pod of the same name and another UID labelled 4", label: "4", podUID: "another-uid", reports: warm, binding: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cri := critesting.NewFakeRuntimeService()
			cri.SetFakeSandboxes([]*critesting.FakePodSandbox{warmSandbox("sbw")})
			cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sbw", "cw")})
			u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, WarmStandby: true, LeaseDurationSeconds: 10}},
				Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: tc.binding}}}
			seen := pods{}
			if tc.podUID != "" {
				labels := map[string]string{holdfastv1.LabelUnit: "u", holdfastv1.LabelWarmStandby: "edge-2"}
				if tc.label != "" {
					labels[holdfastv1.LabelEpoch] = tc.label
				}
				seen["plant/"+holdfastv1.WarmPodName("u", "edge-2")+"@"+tc.podUID] = labels
			}
			agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Pods: seen, Lease: &leaseAnswers{st: tc.reports},
				Clock: clocktesting.NewFakeClock(time.Now()), AuditDir: t.TempDir()}
			if err := agent.Observe(ctx); err != nil {
				t.Fatal(err)
			}
			acts, err := agent.FenceStale(ctx, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := stopCalls(cri) == 1 && len(acts) == 1; got != tc.stopped {
				t.Fatalf("stopped = %v (actions %+v, calls %v), want %v", got, acts, cri.GetCalls(), tc.stopped)
			}
			if tc.stopped && (acts[0].Reason != fence.ReasonStaleEpoch || acts[0].BindingEpoch != 5 || acts[0].Epoch != 4) {
				t.Fatalf("action %+v, want a stale-epoch stop of epoch 4 behind 5", acts[0])
			}
		})
	}
}

// A warm runtime reports Warm: fenced, no deadline. Through an apiserver
// outage the watchdog finds no wedge in it and leaves it running, and the
// node's listing of its runtimes names it only once it is bound to an epoch.
func TestAWarmRuntimeIsNoWedgeAndNoEpochsWriter(t *testing.T) {
	ctx := context.Background()
	cri := critesting.NewFakeRuntimeService()
	cri.SetFakeSandboxes([]*critesting.FakePodSandbox{warmSandbox("sbw")})
	cri.SetFakeContainers([]*critesting.FakeContainer{runtimeContainer("sbw", "cw")})
	u := &holdfastv1.Unit{Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, WarmStandby: true, LeaseDurationSeconds: 10}},
		Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 3}}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	answers := &leaseAnswers{st: &lease.Status{Epoch: 0, Mode: holdfastv1.Failover, State: lease.Warm, Fenced: true}}
	agent := &fence.Agent{CRI: cri, Units: units{"plant/u": u}, Pods: pods{}, Lease: answers, Clock: clk, AuditDir: t.TempDir()}
	for range 30 { // two minutes of outage, far past a lease and hold bound
		clk.Step(4 * time.Second)
		agent.APIServerUnreachable(true)
		if err := agent.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := agent.FenceWedged(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := stopCalls(cri); n != 0 {
		t.Fatalf("the watchdog stopped a warm runtime: %v", cri.GetCalls())
	}
	rts, err := agent.Runtimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rts) != 0 {
		t.Fatalf("the node lists a warm runtime bound to no epoch: %+v", rts)
	}
	answers.st = &lease.Status{Epoch: 4, Mode: holdfastv1.Failover, State: lease.Ungranted, Fenced: true}
	if err := agent.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	rts, err = agent.Runtimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rts) != 1 || rts[0].Epoch != 4 || rts[0].PodUID != "warm-uid" {
		t.Fatalf("the node lists %+v, want the promoted warm runtime at epoch 4", rts)
	}
}
