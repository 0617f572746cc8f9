package units

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
)

// LeaseTargetFor is the renewal target of a unit's runtime pod, when it has
// one: a binding whose recorded promise is Failover and that is not handed
// over, with an address. The reconciler and the warm start both build
// targets with it, so the two roads cannot decide differently about one
// pod. The grants carry the shorter of the Unit's lease and the recorded
// one: never a lease the binding's promise does not record yet (L11), and a
// shorter lease from the first pass that sees it. They go to the lease port
// the pod was built with.
func LeaseTargetFor(u *holdfastv1.Unit, pod *corev1.Pod) (grantor.Target, bool) {
	b := u.Status.RuntimeBinding
	if b == nil || b.Promise == nil || b.Promise.Mode != holdfastv1.Failover || b.HandOver != nil {
		return grantor.Target{}, false
	}
	t, ok := runtimeTarget(u, pod)
	if !ok {
		return grantor.Target{}, false
	}
	t.Duration = b.Promise.LeaseDuration()
	if want := u.Spec.Availability.LeaseDuration(); want >= holdfastv1.MinLeaseDuration && want < t.Duration {
		t.Duration = want
	}
	return t, true
}

// runtimeTarget is where the unit's current binding's runtime answers, when
// its pod has an address; it carries no lease.
func runtimeTarget(u *holdfastv1.Unit, pod *corev1.Pod) (grantor.Target, bool) {
	b := u.Status.RuntimeBinding
	if b == nil || pod == nil || pod.Name != b.Pod || pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() {
		return grantor.Target{}, false
	}
	if e, ok := PodEpoch(pod); !ok || e != b.Epoch {
		return grantor.Target{}, false
	}
	if b.PodUID != "" && string(pod.UID) != b.PodUID {
		// A promoted warm pod is the pod of that UID alone.
		return grantor.Target{}, false
	}
	return grantor.Target{
		Unit:    types.NamespacedName{Namespace: u.Namespace, Name: u.Name},
		Epoch:   b.Epoch,
		PodUID:  b.PodUID,
		Address: fmt.Sprintf("%s:%d", hostForURL(pod.Status.PodIP), podLeasePort(u, pod)),
	}, true
}

// podLeasePort is the lease port the runtime pod was built with.
func podLeasePort(u *holdfastv1.Unit, pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		if c.Name != holdfastv1.RuntimeContainer {
			continue
		}
		for _, p := range c.Ports {
			if p.Name == "lease" {
				return p.ContainerPort
			}
		}
	}
	return u.Spec.Runtime.LeasePort
}

func hostForURL(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}
