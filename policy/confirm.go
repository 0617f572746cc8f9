package policy

import (
	"fmt"
	"strconv"
	"strings"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// ConfirmedFence reads a person's certification that the runtime of the
// Unit's current binding has stopped writing (docs/design.md §3 L5, L6,
// L11, L13): how it was fenced, when holdfast.io/failover-confirm-fenced
// says it and holdfast.io/failover-confirm-epoch names the binding's
// epoch. A confirmation for another epoch, or for none, certifies nothing:
// stale then says why, for the Unit's events and for admission.
func ConfirmedFence(u *holdfastv1.Unit) (how, stale string) {
	how = strings.TrimSpace(u.Annotations[holdfastv1.AnnotationFailoverConfirmFenced])
	if how == "" {
		return "", ""
	}
	var epoch int64
	if b := u.Status.RuntimeBinding; b != nil {
		epoch = b.Epoch
	}
	raw, ok := u.Annotations[holdfastv1.AnnotationFailoverConfirmEpoch]
	if !ok {
		return "", fmt.Sprintf("%s names no epoch: set %s to %d, the epoch of the runtime that was fenced (kubectl holdfast failover --confirm-fenced sets both)",
			holdfastv1.AnnotationFailoverConfirmFenced, holdfastv1.AnnotationFailoverConfirmEpoch, epoch)
	}
	n, err := holdfastv1.ParseEpoch(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Sprintf("%s: %q is not an epoch (a whole number from 1): set it to %d, the epoch of the runtime that was fenced",
			holdfastv1.AnnotationFailoverConfirmEpoch, raw, epoch)
	}
	if n != epoch {
		return "", fmt.Sprintf("%s certifies the runtime of epoch %d, but the binding is at epoch %d: a confirmation of one runtime says nothing of another; if the runtime of epoch %d has stopped, set %s to %d",
			holdfastv1.AnnotationFailoverConfirmFenced, n, epoch, epoch, holdfastv1.AnnotationFailoverConfirmEpoch, epoch)
	}
	return how, ""
}

// ConfirmAnnotations names the pair a person sets to certify the fence of
// the runtime at epoch, for messages that tell them to.
func ConfirmAnnotations(epoch int64) string {
	return fmt.Sprintf("%s (with %s: %q)", holdfastv1.AnnotationFailoverConfirmFenced, holdfastv1.AnnotationFailoverConfirmEpoch, strconv.FormatInt(epoch, 10))
}
