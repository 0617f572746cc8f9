package policy

import (
	"fmt"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// BindingClaim says why the runtime pod named pod, of epoch, may not claim
// the binding b of the unit display names: the epoch must be the
// authorised one and no other pod may hold it. It is empty when the pod
// may. holdfast-scheduler judges every runtime pod by it before it records
// a node (one epoch binds one pod, L7).
func BindingClaim(b *holdfastv1.RuntimeBinding, display string, epoch int64, pod string) string {
	switch {
	case b == nil:
		return fmt.Sprintf("unit %s has no authorised binding", display)
	case b.Epoch != epoch:
		return fmt.Sprintf("epoch %d is not the authorised epoch %d of unit %s", epoch, b.Epoch, display)
	case b.Pod != "" && b.Pod != pod:
		if b.Node != "" {
			return fmt.Sprintf("epoch %d of unit %s is already bound to node %s by pod %s", epoch, display, b.Node, b.Pod)
		}
		return fmt.Sprintf("epoch %d of unit %s belongs to pod %s", epoch, display, b.Pod)
	case b.Node != "" && b.Pod == "":
		return fmt.Sprintf("epoch %d of unit %s is already bound to node %s", epoch, display, b.Node)
	}
	return ""
}
