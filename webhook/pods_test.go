package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

func runtimePod(name, unit, epoch, scheduler, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{holdfastv1.LabelUnit: unit, holdfastv1.LabelEpoch: epoch}},
		Spec: corev1.PodSpec{SchedulerName: scheduler, NodeName: node}}
}

// Only the holdfast controller (or a cluster admin) creates a runtime pod:
// the voters role, which may create pods in the release namespace, and a
// plant user with edit rights are refused.
func TestOnlyTheControllerCreatesRuntimePods(t *testing.T) {
	o := testOptions()
	o.Voters = "system:serviceaccount:holdfast-system:holdfast-controller-voters"
	pod := runtimePod("kiln-1-runtime-e3", "kiln-1", "3", holdfastv1.SchedulerName, "")
	expect(t, checkRuntimePodCreate(o, requester{User: o.Controller}, pod))
	expect(t, checkRuntimePodCreate(o, admin, pod))
	for _, r := range []requester{{User: o.Voters}, {User: "plant-editor", Groups: []string{"system:authenticated"}}} {
		expect(t, checkRuntimePodCreate(o, r, pod),
			"metadata.labels[holdfast.io/unit]: Forbidden: only the holdfast controller (system:serviceaccount:holdfast-system:holdfast-controller) creates the runtime pod of unit kiln-1: a pod outside its binding could write to the unit's devices")
	}
	other := runtimePod("batch-1", "", "", "", "")
	other.Labels = nil
	expect(t, checkRuntimePodCreate(o, requester{User: "plant-editor"}, other))
}

// L7: a runtime pod keeps the epoch it was created for, and only
// holdfast-scheduler places it.
func TestL7RuntimePodRules(t *testing.T) {
	po := testOptions()
	ctrl := requester{User: po.Controller}
	expect(t, checkRuntimePodCreate(po, ctrl, runtimePod("kiln-1-runtime-e3", "kiln-1", "3", holdfastv1.SchedulerName, "")))
	expect(t, checkRuntimePodCreate(po, ctrl, runtimePod("kiln-1-runtime-e3", "kiln-1", "3", "default-scheduler", "edge-2")),
		"spec.nodeName: Forbidden: must be empty: holdfast-scheduler places runtime pods, so a failover never lands on a node its rules refuse",
		"spec.schedulerName: Forbidden: must be holdfast-scheduler: another scheduler would bypass the unit's placement rules")
	expect(t, checkRuntimePodCreate(po, ctrl, runtimePod("kiln-1-runtime-e03", "kiln-1", "03", holdfastv1.SchedulerName, "")),
		`metadata.labels[holdfast.io/epoch]: Invalid value: "03": must be the binding's epoch, a positive integer`)
	expect(t, checkRuntimePodCreate(po, ctrl, runtimePod("x", "kiln-1", "0", holdfastv1.SchedulerName, "")),
		`metadata.labels[holdfast.io/epoch]: Invalid value: "0": must be the binding's epoch, a positive integer`)
	expect(t, checkRuntimePodCreate(po, ctrl, runtimePod("kiln-2-runtime-e3", "kiln-1", "3", holdfastv1.SchedulerName, "")),
		`metadata.name: Invalid value: "kiln-2-runtime-e3": a runtime pod of unit kiln-1 at epoch 3 is named kiln-1-runtime-e3`)
	expect(t, checkRuntimePodUpdate(runtimePod("p", "kiln-1", "3", "", ""), runtimePod("p", "kiln-1", "4", "", "")),
		"metadata.labels[holdfast.io/epoch]: Forbidden: is set when the runtime pod is created and never changes: the fence agent stops runtimes by it")
	unlabelled := runtimePod("p", "", "", "", "")
	unlabelled.Labels = nil
	expect(t, checkRuntimePodUpdate(unlabelled, runtimePod("p", "kiln-1", "3", "", "")),
		"metadata.labels[holdfast.io/epoch]: Forbidden: is set when the runtime pod is created and never changes: the fence agent stops runtimes by it",
		"metadata.labels[holdfast.io/unit]: Forbidden: is set when the runtime pod is created and never changes: the fence agent stops runtimes by it")

	o := testOptions()
	pod := runtimePod("kiln-1-runtime-e3", "kiln-1", "3", holdfastv1.SchedulerName, "")
	expect(t, checkBinding(o, admin, &corev1.Binding{}, pod),
		"target: Forbidden: pod kiln-1-runtime-e3 is the runtime of unit kiln-1; only holdfast-scheduler (system:serviceaccount:holdfast-system:holdfast-scheduler) binds it to a node")
	expect(t, checkBinding(o, requester{User: o.Scheduler}, &corev1.Binding{}, pod))
	expect(t, checkBinding(o, admin, &corev1.Binding{}, &corev1.Pod{}))
}
