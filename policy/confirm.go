package policy

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// ConfirmedFence reads a person's certification that the runtime of the
// Unit's current binding has stopped writing (docs/design.md §3 L5, L6,
// L11, L13): how it was fenced, when holdfast.io/failover-confirm-fenced
// says it, holdfast.io/failover-confirm-epoch names the binding's epoch and
// holdfast.io/failover-confirm-incarnation names running, the binding's
// runtime process as the apiserver has it now (nil: no runtime pod). The
// epoch alone cannot tell a stopped process from the one the kubelet
// restarted in its place, or from a re-created pod: a confirmation written
// before either (refused then and applied later by a GitOps tool, or
// copied) certifies nothing, and stale then says which annotation is at
// fault and why, for the Unit's events and for admission.
func ConfirmedFence(u *holdfastv1.Unit, running *holdfastv1.RuntimeIncarnation) (how string, stale *StaleConfirmation) {
	how = strings.TrimSpace(u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced])
	if how == "" {
		return "", nil
	}
	epochFault := func(format string, args ...any) (string, *StaleConfirmation) {
		return "", &StaleConfirmation{Annotation: holdfastv1.AnnotationFailoverConfirmEpoch, Reason: fmt.Sprintf(format, args...)}
	}
	incarnationFault := func(format string, args ...any) (string, *StaleConfirmation) {
		return "", &StaleConfirmation{Annotation: holdfastv1.AnnotationFailoverConfirmIncarnation, Reason: fmt.Sprintf(format, args...)}
	}
	var epoch int64
	if b := u.Status.RuntimeBinding; b != nil {
		epoch = b.Epoch
	}
	raw, ok := u.Annotations[holdfastv1.AnnotationFailoverConfirmEpoch]
	if !ok {
		return epochFault("%s names no epoch: set %s to %d, the epoch of the runtime that was fenced (kubectl holdfast failover --confirm-fenced sets both)",
			holdfastv1.AnnotationFailoverConfirmFenced, holdfastv1.AnnotationFailoverConfirmEpoch, epoch)
	}
	n, err := holdfastv1.ParseEpoch(strings.TrimSpace(raw))
	if err != nil {
		return epochFault("%s: %q is not an epoch (a whole number from 1): set it to %d, the epoch of the runtime that was fenced",
			holdfastv1.AnnotationFailoverConfirmEpoch, raw, epoch)
	}
	if n != epoch {
		return epochFault("%s certifies the runtime of epoch %d, but the binding is at epoch %d: a confirmation of one runtime says nothing of another; if the runtime of epoch %d has stopped, set %s to %d",
			holdfastv1.AnnotationFailoverConfirmFenced, n, epoch, epoch, holdfastv1.AnnotationFailoverConfirmEpoch, epoch)
	}
	want := IncarnationValue(running)
	raw, ok = u.Annotations[holdfastv1.AnnotationFailoverConfirmIncarnation]
	if !ok {
		return incarnationFault("%s names no runtime process: set %s to %q, the runtime of epoch %d as its pod reads now (kubectl holdfast failover --confirm-fenced sets it)",
			holdfastv1.AnnotationFailoverConfirmFenced, holdfastv1.AnnotationFailoverConfirmIncarnation, want, epoch)
	}
	named, err := holdfastv1.ParseIncarnation(strings.TrimSpace(raw))
	if err != nil {
		return incarnationFault("%s: %v: set it to %q, the runtime of epoch %d as its pod reads now",
			holdfastv1.AnnotationFailoverConfirmIncarnation, err, want, epoch)
	}
	if got := IncarnationValue(named); got != want {
		return incarnationFault("%s certifies %s, but the runtime of epoch %d %s: %s; a confirmation of one process says nothing of another; if it has stopped too, set %s to %q",
			holdfastv1.AnnotationFailoverConfirmFenced, describeIncarnation(named), epoch, describeRunning(running),
			sinceWhy(named, running), holdfastv1.AnnotationFailoverConfirmIncarnation, want)
	}
	return how, nil
}

// StaleConfirmation says why a fence confirmation certifies nothing: the
// annotation at fault (the epoch, or the runtime process, it names) and the
// reason, which tells the person what to set it to.
type StaleConfirmation struct {
	Annotation string
	Reason     string
}

// Incarnation is the runtime container's current life: the pod's UID and the
// container's restart count.
func Incarnation(pod *corev1.Pod) holdfastv1.RuntimeIncarnation {
	inc := holdfastv1.RuntimeIncarnation{PodUID: string(pod.UID)}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == holdfastv1.RuntimeContainer {
			inc.RestartCount = cs.RestartCount
		}
	}
	return inc
}

// IncarnationOf is the incarnation of pod, nil for no pod.
func IncarnationOf(pod *corev1.Pod) *holdfastv1.RuntimeIncarnation {
	if pod == nil {
		return nil
	}
	i := Incarnation(pod)
	return &i
}

// IncarnationValue spells an incarnation as
// holdfast.io/failover-confirm-incarnation does.
func IncarnationValue(i *holdfastv1.RuntimeIncarnation) string {
	if i == nil {
		return holdfastv1.IncarnationNone
	}
	return i.String()
}

func describeIncarnation(i *holdfastv1.RuntimeIncarnation) string {
	if i == nil {
		return "no runtime pod"
	}
	return fmt.Sprintf("pod %s restart %d", i.PodUID, i.RestartCount)
}

func describeRunning(i *holdfastv1.RuntimeIncarnation) string {
	if i == nil {
		return "has no pod"
	}
	return "is " + describeIncarnation(i)
}

func sinceWhy(named, running *holdfastv1.RuntimeIncarnation) string {
	switch {
	case running == nil:
		return "its pod is gone since"
	case named == nil:
		return "a runtime pod exists since"
	case named.PodUID != running.PodUID:
		return "its pod was re-created since"
	case running.RestartCount > named.RestartCount:
		return "the kubelet restarted it since"
	default:
		return "it names a restart the runtime has not reached"
	}
}

// ConfirmFenced is a person's certification, in the words how, that the
// runtime at epoch, running (nil: no runtime pod), has stopped: the
// annotations ConfirmedFence reads.
func ConfirmFenced(how string, epoch int64, running *holdfastv1.RuntimeIncarnation) map[string]string {
	return map[string]string{
		holdfastv1.AnnotationFailoverConfirmFenced:      how,
		holdfastv1.AnnotationFailoverConfirmEpoch:       strconv.FormatInt(epoch, 10),
		holdfastv1.AnnotationFailoverConfirmIncarnation: IncarnationValue(running),
	}
}

// ConfirmAnnotations names the annotations a person sets to certify the
// fence of the runtime at epoch, running (nil: no runtime pod), for
// messages that tell them to.
func ConfirmAnnotations(epoch int64, running *holdfastv1.RuntimeIncarnation) string {
	c := ConfirmFenced("", epoch, running)
	return fmt.Sprintf("%s (with %s: %q and %s: %q)", holdfastv1.AnnotationFailoverConfirmFenced,
		holdfastv1.AnnotationFailoverConfirmEpoch, c[holdfastv1.AnnotationFailoverConfirmEpoch],
		holdfastv1.AnnotationFailoverConfirmIncarnation, c[holdfastv1.AnnotationFailoverConfirmIncarnation])
}
