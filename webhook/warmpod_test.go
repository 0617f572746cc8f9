package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// warmUnit keeps warm standbys on edge-2 and edge-3, bound at epoch 3 on
// edge-1.
func warmUnit() *holdfastv1.Unit {
	return &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Name: "kiln-1", Namespace: "plant"},
		Spec: holdfastv1.UnitSpec{Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, WarmStandby: true,
			Targets: &holdfastv1.FailoverTargets{Nodes: []string{"edge-2", "edge-3"}}}},
		Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 3, Node: "edge-1", Pod: "kiln-1-runtime-e3"}}}
}

func warmPod(node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.WarmPodName("kiln-1", node), Namespace: "plant", UID: "warm-uid",
		Labels: map[string]string{holdfastv1.LabelUnit: "kiln-1", holdfastv1.LabelWarmStandby: node}},
		Spec: corev1.PodSpec{SchedulerName: holdfastv1.SchedulerName}}
}

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

// A warm standby pod is the controller's, holds no epoch and stands by on a
// designated standby of a unit that keeps warm standbys, not its bound node.
func TestAWarmPodIsCreatedByTheControllerOnADesignatedStandbyWithoutAnEpoch(t *testing.T) {
	o := testOptions()
	ctrl := requester{User: o.Controller}
	expect(t, checkWarmPodCreate(o, ctrl, warmPod("edge-2"), warmUnit(), node("edge-2")))
	expect(t, checkWarmPodCreate(o, admin, warmPod("edge-2"), warmUnit(), node("edge-2")),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: only the holdfast controller (system:serviceaccount:holdfast-system:holdfast-controller) creates a warm standby pod of unit kiln-1: a grant may make it the unit's writer")
	labelled := warmPod("edge-2")
	labelled.Labels[holdfastv1.LabelEpoch] = "4"
	expect(t, checkWarmPodCreate(o, ctrl, labelled, warmUnit(), node("edge-2")),
		`metadata.labels[holdfast.io/epoch]: Forbidden: a warm standby pod is created without an epoch (not "4"): the controller labels it once a binding promotes it`)
	misnamed := warmPod("edge-2")
	misnamed.Name = "kiln-1-warm-edge-2"
	expect(t, checkWarmPodCreate(o, ctrl, misnamed, warmUnit(), node("edge-2")),
		`metadata.name: Invalid value: "kiln-1-warm-edge-2": the warm standby pod of unit kiln-1 on node edge-2 is named `+holdfastv1.WarmPodName("kiln-1", "edge-2"))
	placed := warmPod("edge-2")
	placed.Spec.NodeName, placed.Spec.SchedulerName = "edge-2", "default-scheduler"
	expect(t, checkWarmPodCreate(o, ctrl, placed, warmUnit(), node("edge-2")),
		"spec.nodeName: Forbidden: must be empty: holdfast-scheduler places runtime pods, so a failover never lands on a node its rules refuse",
		"spec.schedulerName: Forbidden: must be holdfast-scheduler: another scheduler would bypass the unit's placement rules")
	expect(t, checkWarmPodCreate(o, ctrl, warmPod("edge-4"), warmUnit(), node("edge-4")),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: node edge-4 is not a designated standby of unit kiln-1 (spec.availability.targets)")
	bound := warmUnit()
	bound.Status.RuntimeBinding.Node = "edge-2"
	expect(t, checkWarmPodCreate(o, ctrl, warmPod("edge-2"), bound, node("edge-2")),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: node edge-2 is where unit kiln-1 is bound; a warm standby is kept on another designated standby")
	cold := warmUnit()
	cold.Spec.Availability.WarmStandby = false
	expect(t, checkWarmPodCreate(o, ctrl, warmPod("edge-2"), cold, node("edge-2")),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: unit kiln-1 keeps no warm standby: set spec.availability.warmStandby on a Failover unit")
	expect(t, checkWarmPodCreate(o, ctrl, warmPod("edge-2"), nil, node("edge-2")),
		"metadata.labels[holdfast.io/unit]: Forbidden: unit kiln-1 does not exist: a warm standby pod stands by for a Unit with spec.availability.warmStandby")
	expect(t, checkWarmPodCreate(o, ctrl, warmPod("edge-2"), warmUnit(), nil),
		"metadata.labels[holdfast.io/warm-standby]: Forbidden: node edge-2 does not exist: name a designated standby of unit kiln-1")
}

// L7 for a warm pod: its epoch label is added once, by the controller, to
// the epoch of the binding that records this pod (name and UID); its unit
// and standby labels never change, and once labelled, neither does its
// epoch.
func TestAWarmPodIsLabelledOnceWithTheEpochOfTheBindingThatNamesIt(t *testing.T) {
	o := testOptions()
	ctrl := requester{User: o.Controller}
	promoted := warmUnit()
	promoted.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 4, Node: "edge-2", Pod: holdfastv1.WarmPodName("kiln-1", "edge-2"), PodUID: "warm-uid"}
	old := warmPod("edge-2")
	labelled := func(epoch string) *corev1.Pod {
		p := warmPod("edge-2")
		p.Labels[holdfastv1.LabelEpoch] = epoch
		return p
	}
	if !isPromotion(old, labelled("4")) {
		t.Fatal("adding the epoch label to a warm pod is not taken for a promotion")
	}
	expect(t, checkRuntimePodUpdate(old, labelled("4")))
	expect(t, checkPromotion(o, ctrl, labelled("4"), promoted))
	expect(t, checkPromotion(o, admin, labelled("4"), promoted),
		"metadata.labels[holdfast.io/epoch]: Forbidden: only the holdfast controller (system:serviceaccount:holdfast-system:holdfast-controller) labels a warm standby pod with the epoch of the binding that promoted it")
	expect(t, checkPromotion(o, ctrl, labelled("5"), promoted),
		`metadata.labels[holdfast.io/epoch]: Forbidden: may be set only to the epoch of unit kiln-1's binding that records this pod by name and UID (the binding is epoch 4, pod "`+
			holdfastv1.WarmPodName("kiln-1", "edge-2")+`", podUID "warm-uid"; this label is "5"): record the binding first`)
	other := promoted.DeepCopy()
	other.Status.RuntimeBinding.PodUID = "an-earlier-uid"
	expect(t, checkPromotion(o, ctrl, labelled("4"), other),
		`metadata.labels[holdfast.io/epoch]: Forbidden: may be set only to the epoch of unit kiln-1's binding that records this pod by name and UID (the binding is epoch 4, pod "`+
			holdfastv1.WarmPodName("kiln-1", "edge-2")+`", podUID "an-earlier-uid"; this label is "4"): record the binding first`)
	expect(t, checkPromotion(o, ctrl, labelled("3"), warmUnit()),
		`metadata.labels[holdfast.io/epoch]: Forbidden: may be set only to the epoch of unit kiln-1's binding that records this pod by name and UID (the binding is epoch 3, pod "kiln-1-runtime-e3", podUID ""; this label is "3"): record the binding first`)
	expect(t, checkPromotion(o, ctrl, labelled("4"), nil),
		"metadata.labels[holdfast.io/epoch]: Forbidden: unit kiln-1 has no binding: a warm standby pod is labelled with an epoch only once the binding of that epoch records it")

	never := "is set when the runtime pod is created and never changes: the fence agent stops runtimes by it"
	if isPromotion(labelled("4"), labelled("5")) {
		t.Fatal("a promoted pod's relabel is taken for a promotion")
	}
	expect(t, checkRuntimePodUpdate(labelled("4"), labelled("5")), "metadata.labels[holdfast.io/epoch]: Forbidden: "+never)
	expect(t, checkRuntimePodUpdate(labelled("4"), old), "metadata.labels[holdfast.io/epoch]: Forbidden: "+never)
	moved := labelled("4")
	moved.Labels[holdfastv1.LabelWarmStandby] = "edge-3"
	if isPromotion(old, moved) {
		t.Fatal("a promotion that moves the standby label is taken for a promotion")
	}
	expect(t, checkRuntimePodUpdate(old, moved), "metadata.labels[holdfast.io/epoch]: Forbidden: "+never, "metadata.labels[holdfast.io/warm-standby]: Forbidden: "+never)
	unwarmed := warmPod("edge-2")
	delete(unwarmed.Labels, holdfastv1.LabelWarmStandby)
	expect(t, checkRuntimePodUpdate(old, unwarmed), "metadata.labels[holdfast.io/warm-standby]: Forbidden: "+never)
	warmed := runtimePod("kiln-1-runtime-e3", "kiln-1", "3", "", "")
	cold := warmed.DeepCopy()
	warmed.Labels[holdfastv1.LabelWarmStandby] = "edge-2"
	expect(t, checkRuntimePodUpdate(cold, warmed), "metadata.labels[holdfast.io/warm-standby]: Forbidden: "+never)
}
