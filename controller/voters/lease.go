package voters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/policy"
)

// ErrLeaseLost is a renewal or release refused because the Lease names
// another holder now.
var ErrLeaseLost = errors.New("the swap Lease is held by another holder")

// SwapLease acquires, renews and releases kube-system/holdfast-voter-swap.
// Every write is an update of the version read (optimistic concurrency), so
// two holders can never both win.
type SwapLease struct {
	Client   client.Client
	Identity string
	Duration time.Duration
}

// Acquire takes the Lease for swap id, naming the swap's nodes (which node
// recovery leaves alone while the Lease is unexpired). observed is the
// Lease as last read (nil: absent). It refuses a Lease another holder holds
// unexpired.
func (l *SwapLease) Acquire(ctx context.Context, observed *coordinationv1.Lease, id string, nodes []string, now time.Time) (*coordinationv1.Lease, error) {
	if h := policy.SwapLeaseHolder(observed); h != "" && h != l.Identity && policy.SwapLeaseHeld(observed, now) {
		return nil, fmt.Errorf("%w (%s)", ErrLeaseLost, h)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: holdfastv1.SwapLeaseNamespace, Name: holdfastv1.SwapLeaseName}}
	if observed != nil {
		lease = observed.DeepCopy()
	}
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Labels[holdfastv1.LabelGuarded] = "true"
	lease.Annotations[holdfastv1.AnnotationSwapID] = id
	lease.Annotations[holdfastv1.AnnotationSwapNodes] = strings.Join(nodes, ",")
	t := metav1.NewMicroTime(now)
	secs := int32(l.Duration / time.Second)
	lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: &l.Identity, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t,
		LeaseTransitions: lease.Spec.LeaseTransitions}
	if observed != nil && policy.SwapLeaseHolder(observed) != l.Identity {
		n := lease.Spec.LeaseTransitions
		if n == nil {
			n = new(int32)
		}
		lease.Spec.LeaseTransitions = new(*n + 1)
	}
	if observed == nil {
		return lease, l.Client.Create(ctx, lease)
	}
	return lease, l.Client.Update(ctx, lease)
}

// Renew moves renewTime to now, keeping acquireTime and the annotations. It
// fails with ErrLeaseLost when the holder changed, and with a conflict when
// anything changed since observed was read.
func (l *SwapLease) Renew(ctx context.Context, observed *coordinationv1.Lease, now time.Time) (*coordinationv1.Lease, error) {
	if policy.SwapLeaseHolder(observed) != l.Identity {
		return nil, fmt.Errorf("%w (%s)", ErrLeaseLost, policy.SwapLeaseHolder(observed))
	}
	lease := observed.DeepCopy()
	t := metav1.NewMicroTime(now)
	lease.Spec.RenewTime = &t
	secs := int32(l.Duration / time.Second)
	lease.Spec.LeaseDurationSeconds = &secs
	return lease, l.Client.Update(ctx, lease)
}

// Release frees the Lease: no holder, no swap annotations.
func (l *SwapLease) Release(ctx context.Context, observed *coordinationv1.Lease) error {
	if observed == nil {
		return nil
	}
	if policy.SwapLeaseHolder(observed) != l.Identity {
		return fmt.Errorf("%w (%s)", ErrLeaseLost, policy.SwapLeaseHolder(observed))
	}
	lease := observed.DeepCopy()
	lease.Spec.HolderIdentity = nil
	lease.Spec.RenewTime = nil
	lease.Spec.AcquireTime = nil
	delete(lease.Annotations, holdfastv1.AnnotationSwapID)
	delete(lease.Annotations, holdfastv1.AnnotationSwapNodes)
	return l.Client.Update(ctx, lease)
}
