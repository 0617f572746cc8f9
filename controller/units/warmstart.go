package units

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/grantor"
)

// Acquirer records the instant leadership was acquired.
type Acquirer interface {
	Acquire() time.Time
}

// WarmStart is a leader-election runnable: the instant this process wins, it
// records its tenure and starts a renewal loop for every runtime the
// reconciler would renew, from the cache the manager synced before the
// election, with the reconciler's own LeaseTargetFor. It writes nothing. It
// runs behind the election on purpose: a follower granting liveness would
// grant to runtimes it has no authority to move.
type WarmStart struct {
	Reader  client.Reader
	Grantor *grantor.Grantor
	Tenure  Acquirer
}

// Start runs the warm start once and returns.
func (w *WarmStart) Start(ctx context.Context) error {
	at := w.Tenure.Acquire()
	n, err := w.Run(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Warm start from the cache")
		// The reconciler starts every loop on its first pass anyway.
		return nil
	}
	klog.FromContext(ctx).Info("Acquired the grantor's leadership; renewal loops started from the cache", "loops", n, "acquired", at)
	return nil
}

// Run starts the loops and returns how many targets it found.
func (w *WarmStart) Run(ctx context.Context) (int, error) {
	var units holdfastv1.UnitList
	if err := w.Reader.List(ctx, &units); err != nil {
		return 0, err
	}
	var pods corev1.PodList
	if err := w.Reader.List(ctx, &pods, client.HasLabels{holdfastv1.LabelUnit}); err != nil {
		return 0, err
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		byName[p.Namespace+"/"+p.Name] = p
	}
	n := 0
	for i := range units.Items {
		u := &units.Items[i]
		b := u.Status.RuntimeBinding
		if b == nil {
			continue
		}
		if t, ok := LeaseTargetFor(u, byName[u.Namespace+"/"+b.Pod]); ok {
			w.Grantor.Ensure(t)
			n++
		}
	}
	return n, nil
}
