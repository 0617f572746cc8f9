package leasecerts

import (
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

var now = time.Date(2026, 8, 24, 12, 0, 0, 0, time.UTC)

// fixture: the kubelet of node edge-1 asks for the lease certificate of
// the runtime pod of kiln-1's current binding (epoch 3), a second old.
func fixture() (*certificatesv1.PodCertificateRequest, *corev1.Pod, *holdfastv1.Unit) {
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: "kiln-1", UID: "unit-uid"},
		Status:     holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 3, Pod: "kiln-1-runtime-e3", Node: "edge-1"}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: "kiln-1-runtime-e3", UID: "pod-uid",
			Labels: map[string]string{holdfastv1.LabelUnit: "kiln-1", holdfastv1.LabelEpoch: "3"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: holdfastv1.GroupVersion.String(), Kind: "Unit", Name: "kiln-1", UID: "unit-uid",
				Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "edge-1"},
	}
	req := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plant", Name: "req-1", CreationTimestamp: metav1.NewTime(now.Add(-time.Second))},
		Spec: certificatesv1.PodCertificateRequestSpec{SignerName: leaseapi.SignerName, PodName: "kiln-1-runtime-e3", PodUID: "pod-uid",
			NodeName: "edge-1"},
	}
	return req, pod, u
}

// L12, who gets a runtime certificate: only the live pod of a Unit's
// current binding, on its own node; a request the cache cannot judge yet
// waits, for a minute at most.
func TestTheSignerIssuesOnlyToTheCurrentBindingsPod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*certificatesv1.PodCertificateRequest, *corev1.Pod, *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit)
		want   string // "issue", "wait" or the denial's reason
		msg    string
	}{
		{name: "the current binding's pod", want: "issue"},
		{name: "a pod of an earlier epoch", want: "StaleEpoch", msg: "bound at epoch 4",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				u.Status.RuntimeBinding.Epoch, u.Status.RuntimeBinding.Pod = 4, "kiln-1-runtime-e4"
				return p, u
			}},
		{name: "a binding the cache has not seen yet", want: "wait",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				u.Status.RuntimeBinding.Epoch = 2
				return p, u
			}},
		{name: "... and never sees", want: "NotTheCurrentBinding", msg: "no binding at epoch 3",
			mutate: func(r *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				r.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Minute))
				u.Status.RuntimeBinding.Epoch = 2
				return p, u
			}},
		{name: "another pod of the same epoch", want: "NotTheCurrentBinding", msg: "runs pod kiln-1-runtime-e3, not kiln-1-runtime-e3-copy",
			mutate: func(r *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				p.Name, r.Spec.PodName = "kiln-1-runtime-e3-copy", "kiln-1-runtime-e3-copy"
				return p, u
			}},
		{name: "a pod of another node", want: "WrongNode", msg: "runs on node edge-1; the request came for node edge-2",
			mutate: func(r *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				r.Spec.NodeName = "edge-2"
				return p, u
			}},
		{name: "a pod without the unit label", want: "NotARuntimePod", msg: "is not a runtime pod",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				delete(p.Labels, holdfastv1.LabelUnit)
				return p, u
			}},
		{name: "a pod its Unit does not own", want: "NotARuntimePod", msg: "is not a runtime pod",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				p.OwnerReferences = nil
				return p, u
			}},
		{name: "a pod owned by a Unit of the same name, since re-created", want: "NotARuntimePod", msg: "owned by another unit",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				u.UID = "new-unit-uid"
				return p, u
			}},
		{name: "a replaced pod of the same name", want: "wait",
			mutate: func(r *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				r.Spec.PodUID = "old-pod-uid"
				return p, u
			}},
		{name: "a pod not in the cache, a minute on", want: "NotTheCurrentBinding", msg: "is not a live holdfast runtime pod",
			mutate: func(r *certificatesv1.PodCertificateRequest, _ *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				r.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Minute))
				return nil, u
			}},
		{name: "a pod being deleted", want: "NotTheCurrentBinding", msg: "is being deleted",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) (*corev1.Pod, *holdfastv1.Unit) {
				p.DeletionTimestamp = ptr.To(metav1.NewTime(now))
				return p, u
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, pod, u := fixture()
			if tc.mutate != nil {
				pod, u = tc.mutate(req, pod, u)
			}
			v := judge(req, pod, u, now)
			got := "issue"
			switch {
			case v.wait:
				got = "wait"
			case v.deny:
				got = v.reason
			}
			if got != tc.want || !strings.Contains(v.message, tc.msg) {
				t.Fatalf("judge = %+v, want %s with %q", v, tc.want, tc.msg)
			}
			if got == "issue" && (v.unit != "plant/kiln-1" || v.epoch != 3) {
				t.Fatalf("issued for %s at %d, want plant/kiln-1 at 3", v.unit, v.epoch)
			}
		})
	}
}

// warmFixture: the kubelet of edge-2 asks for the lease certificate of
// kiln-1's warm standby pod there, while kiln-1 (warmStandby) is bound at
// epoch 3 on edge-1.
func warmFixture() (*certificatesv1.PodCertificateRequest, *corev1.Pod, *holdfastv1.Unit) {
	req, pod, u := fixture()
	u.Spec.Availability = holdfastv1.Availability{Mode: holdfastv1.Failover, WarmStandby: true}
	pod.Name, pod.UID = holdfastv1.WarmPodName("kiln-1", "edge-2"), "warm-uid"
	pod.Labels = map[string]string{holdfastv1.LabelUnit: "kiln-1", holdfastv1.LabelWarmStandby: "edge-2"}
	pod.Spec.NodeName = "edge-2"
	req.Spec.PodName, req.Spec.PodUID, req.Spec.NodeName = pod.Name, pod.UID, "edge-2"
	return req, pod, u
}

// promote records the warm pod as the binding of epoch 4 on its node and,
// if label, labels it with that epoch, as the controller's promotion does.
func promote(p *corev1.Pod, u *holdfastv1.Unit, label bool) {
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 4, Node: "edge-2", Pod: p.Name, PodUID: string(p.UID)}
	if label {
		p.Labels[holdfastv1.LabelEpoch] = "4"
	}
}

// L12 for a warm standby: its certificate names its unit and its UID (it
// has no epoch yet), issued while its Unit keeps warm standbys, on the
// node it stands by, or once a binding promoted it; a warm pod labelled
// with an epoch is judged as that epoch's runtime. Anything else is denied.
func TestTheSignerIssuesAWarmPodTheIdentityOfItsUID(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*certificatesv1.PodCertificateRequest, *corev1.Pod, *holdfastv1.Unit)
		want   string // "issue", "wait" or the denial's reason
		msg    string
	}{
		{name: "a warm pod on its standby", want: "issue"},
		{name: "promoted, before its label", want: "issue",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) { promote(p, u, false) }},
		{name: "promoted and labelled", want: "issue",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) { promote(p, u, true) }},
		{name: "promoted, once the unit stopped keeping warm standbys", want: "issue",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) {
				promote(p, u, true)
				u.Spec.Availability.WarmStandby = false
			}},
		{name: "promoted, then left behind", want: "StaleEpoch", msg: "bound at epoch 5",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) {
				promote(p, u, true)
				u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 5, Node: "edge-3", Pod: "kiln-1-runtime-e5"}
			}},
		{name: "labelled for a binding the cache has not seen", want: "wait",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, _ *holdfastv1.Unit) {
				p.Labels[holdfastv1.LabelEpoch] = "4"
			}},
		{name: "labelled for the epoch of another pod", want: "NotTheCurrentBinding", msg: "runs pod kiln-1-runtime-e3",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, _ *holdfastv1.Unit) {
				p.Labels[holdfastv1.LabelEpoch] = "3"
			}},
		{name: "a binding that recorded another pod of the same name", want: "NotAWarmStandby", msg: "keeps no warm standby",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) {
				promote(p, u, false)
				u.Status.RuntimeBinding.PodUID = "an-earlier-warm-uid"
				u.Spec.Availability.WarmStandby = false
			}},
		{name: "a unit that keeps no warm standby", want: "NotAWarmStandby", msg: "spec.availability.warmStandby is false",
			mutate: func(_ *certificatesv1.PodCertificateRequest, _ *corev1.Pod, u *holdfastv1.Unit) {
				u.Spec.Availability.WarmStandby = false
			}},
		{name: "on another node than it stands by", want: "WrongNode", msg: "is the standby of node edge-3",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, _ *holdfastv1.Unit) {
				p.Labels[holdfastv1.LabelWarmStandby] = "edge-3"
			}},
		{name: "on the bound node", want: "NotAWarmStandby", msg: "bound node",
			mutate: func(r *certificatesv1.PodCertificateRequest, p *corev1.Pod, u *holdfastv1.Unit) {
				u.Status.RuntimeBinding.Node = "edge-2"
			}},
		{name: "a warm label on a pod its Unit does not own", want: "NotARuntimePod", msg: holdfastv1.LabelWarmStandby,
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, _ *holdfastv1.Unit) {
				p.OwnerReferences = nil
			}},
		{name: "a warm pod with a malformed epoch label", want: "NotARuntimePod", msg: "is not a runtime pod",
			mutate: func(_ *certificatesv1.PodCertificateRequest, p *corev1.Pod, _ *holdfastv1.Unit) {
				p.Labels[holdfastv1.LabelEpoch] = "four"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, pod, u := warmFixture()
			if tc.mutate != nil {
				tc.mutate(req, pod, u)
			}
			v := judge(req, pod, u, now)
			got := "issue"
			switch {
			case v.wait:
				got = "wait"
			case v.deny:
				got = v.reason
			}
			if got != tc.want || !strings.Contains(v.message, tc.msg) {
				t.Fatalf("judge = %+v, want %s with %q", v, tc.want, tc.msg)
			}
			if got == "issue" && (v.unit != "plant/kiln-1" || v.warmUID != "warm-uid") {
				t.Fatalf("issued for %s, warm uid %q; want plant/kiln-1's warm pod warm-uid", v.unit, v.warmUID)
			}
		})
	}
}
