package policy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// A confirmation built by ConfirmFenced for the binding's runtime is read
// back by ConfirmedFence; one that certifies nothing says which annotation
// is at fault (the epoch, or the process it names) and why, so admission
// points at the field without reading the annotations again.
func TestAStaleConfirmationNamesTheAnnotationAtFault(t *testing.T) {
	running := &holdfastv1.RuntimeIncarnation{PodUID: "pod-3", RestartCount: 1}
	unit := func(a map[string]string) *holdfastv1.Unit {
		return &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Annotations: a},
			Status: holdfastv1.UnitStatus{RuntimeBinding: &holdfastv1.RuntimeBinding{Epoch: 3}}}
	}
	with := func(k, v string) map[string]string {
		a := ConfirmFenced("breaker off", 3, running)
		if v == "-" {
			delete(a, k)
		} else {
			a[k] = v
		}
		return a
	}
	if how, stale := ConfirmedFence(unit(ConfirmFenced(" breaker off ", 3, running)), running); how != "breaker off" || stale != nil {
		t.Fatalf("a confirmation of the binding's runtime: %q %+v", how, stale)
	}
	if how, stale := ConfirmedFence(unit(nil), running); how != "" || stale != nil {
		t.Fatalf("no confirmation: %q %+v", how, stale)
	}
	for _, tc := range []struct {
		name, key, value, fault, says string
	}{
		{"no epoch", holdfastv1.AnnotationFailoverConfirmEpoch, "-", holdfastv1.AnnotationFailoverConfirmEpoch, "names no epoch"},
		{"not an epoch", holdfastv1.AnnotationFailoverConfirmEpoch, "three", holdfastv1.AnnotationFailoverConfirmEpoch, "is not an epoch"},
		{"another epoch", holdfastv1.AnnotationFailoverConfirmEpoch, "2", holdfastv1.AnnotationFailoverConfirmEpoch, "certifies the runtime of epoch 2"},
		{"no process", holdfastv1.AnnotationFailoverConfirmIncarnation, "-", holdfastv1.AnnotationFailoverConfirmIncarnation, "names no runtime process"},
		{"not a process", holdfastv1.AnnotationFailoverConfirmIncarnation, "pod-3", holdfastv1.AnnotationFailoverConfirmIncarnation, "set it to \"pod-3/1\""},
		{"an earlier life", holdfastv1.AnnotationFailoverConfirmIncarnation, "pod-3/0", holdfastv1.AnnotationFailoverConfirmIncarnation, "the kubelet restarted it since"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			how, stale := ConfirmedFence(unit(with(tc.key, tc.value)), running)
			if how != "" || stale == nil {
				t.Fatalf("certified %q (%+v), want it stale", how, stale)
			}
			if stale.Annotation != tc.fault || !strings.Contains(stale.Reason, tc.says) {
				t.Fatalf("stale %+v, want %s at fault saying %q", stale, tc.fault, tc.says)
			}
		})
	}
}
