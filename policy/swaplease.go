package policy

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// IsSwapLease reports whether the Lease is kube-system/holdfast-voter-swap.
func IsSwapLease(namespace, name string) bool {
	return namespace == holdfastv1.SwapLeaseNamespace && name == holdfastv1.SwapLeaseName
}

// SwapLeaseHolder is the Lease's holder identity, empty when free.
func SwapLeaseHolder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// SwapLeaseExpiry is when a held Lease expires: its last renewal (or its
// acquisition when never renewed) plus its duration. ok is false when the
// Lease is free, or held without a time or a duration; such a Lease never
// expires on its own, because treating a half-written Lease as expired would
// let a second swap start beside the first.
func SwapLeaseExpiry(l *coordinationv1.Lease) (expiry time.Time, ok bool) {
	if SwapLeaseHolder(l) == "" || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	from := l.Spec.RenewTime
	if from == nil {
		from = l.Spec.AcquireTime
	}
	if from == nil {
		return time.Time{}, false
	}
	return from.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second), true
}

// SwapLeaseHeld reports whether the Lease has a holder and has not expired at
// now. A holder without an expiry counts as held (see SwapLeaseExpiry).
func SwapLeaseHeld(l *coordinationv1.Lease, now time.Time) bool {
	if SwapLeaseHolder(l) == "" {
		return false
	}
	expiry, ok := SwapLeaseExpiry(l)
	return !ok || now.Before(expiry)
}

// SwapLeaseNodes are the nodes the Lease's swap-nodes annotation lists
// (comma separated, blanks ignored), in order.
func SwapLeaseNodes(l *coordinationv1.Lease) []string {
	if l == nil {
		return nil
	}
	return SplitNodes(l.Annotations[holdfastv1.AnnotationSwapNodes])
}

// SplitNodes splits a comma-separated node list, dropping blanks.
func SplitNodes(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// SwapLeaseNames reports whether the unexpired swap Lease names the node: the
// node is in a swap, and node recovery (or anything else that takes nodes out
// of service) must leave it alone.
func SwapLeaseNames(l *coordinationv1.Lease, node string, now time.Time) bool {
	if !SwapLeaseHeld(l, now) {
		return false
	}
	for _, n := range SwapLeaseNodes(l) {
		if n == node {
			return true
		}
	}
	return false
}
