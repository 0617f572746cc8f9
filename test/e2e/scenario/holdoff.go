package scenario

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/holdfast-io/holdfast/controller/leadership"
	"github.com/holdfast-io/holdfast/test/cluster"
)

// GrantorElection is the units role's election Lease in the release
// namespace.
const GrantorElection = "holdfast-grantor"

// holdOffSlack covers the leader recording its tenure after the election
// Lease's acquireTime: its first reconcile pass or its warm start, a
// moment after acquiring.
const holdOffSlack = 2 * time.Second

// WaitHoldOffOver waits until the grantor's leader reads a lease expiry of
// a unit with lease and margin as a fence again: past its hold-off
// (controller/leadership.HoldOffDeadline from its election Lease's
// acquireTime, with the World's stand-down). Until then an expiry is
// answered by no re-bind, and a partition briefer than the hold-off ends
// with the same runtime holding again: a drill about a failover waits this
// out first (a leader elected at start-up, or after a drill killed one).
func (w *World) WaitHoldOffOver(ctx context.Context, lease, margin time.Duration) error {
	var last string
	err := cluster.Poll(ctx, 5*time.Minute, func() (bool, error) {
		var el coordinationv1.Lease
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HoldfastNamespace, Name: GrantorElection}, &el); err != nil {
			last = err.Error()
			return false, nil
		}
		if el.Spec.AcquireTime == nil || el.Spec.HolderIdentity == nil {
			last = fmt.Sprintf("no holder: %+v", el.Spec)
			return false, nil
		}
		until := leadership.HoldOffDeadline(el.Spec.AcquireTime.Time, w.standDown, lease, margin).Add(holdOffSlack)
		last = fmt.Sprintf("%s holds off until %s", *el.Spec.HolderIdentity, until.Format(time.RFC3339))
		return time.Now().After(until), nil
	})
	if err != nil {
		return fmt.Errorf("the grantor's leader never left its hold-off (%s): %w", last, err)
	}
	return nil
}
