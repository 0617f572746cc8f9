// Package signature holds the holdfast plugins' one answer to the
// scheduler's pod signatures (batching pods whose results can be reused).
package signature

import fwk "k8s.io/kube-scheduler/framework"

// Alone refuses a signature to a pod the plugin places (alone): its result
// depends on more than node state, so the scheduler places it on its own;
// what names such a pod in the status. Any other pod gets none of the
// plugin's fragments: the plugin does nothing to it.
func Alone(alone bool, what string) ([]fwk.SignFragment, *fwk.Status) {
	if alone {
		return nil, fwk.NewStatus(fwk.Unschedulable, what+" is placed on its own")
	}
	return nil, nil
}
