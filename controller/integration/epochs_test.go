//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/poll"
)

// TestARecreatedUnitNeverReusesAnEpoch (L13): a unit is created, failed
// over, deleted and created again under the next leader; its new first
// epoch is above every epoch the deleted unit held, and the failover after
// it above that. The next leader's clock is an hour behind the first's (a
// clock stepped back across leaders): the cluster's epoch record keeps the
// order. Or the record is gone (a rebuilt cluster) and the next leader's
// clock is later: the clock keeps it.
func TestARecreatedUnitNeverReusesAnEpoch(t *testing.T) {
	t0 := time.Date(2031, 1, 1, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		next       time.Time
		loseRecord bool
	}{
		{"the next leader's clock is an hour behind", t0.Add(-time.Hour), false},
		{"the epoch record was lost and the clock moved on", t0.Add(time.Minute), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			electionNS := ns + "-election"
			ensureNamespace(t, electionNS)
			edge, standby := ns+"-edge", ns+"-standby"
			node(t, edge, map[string]string{"holdfast.io/device": ns})
			node(t, standby, nil)
			key := types.NamespacedName{Namespace: ns, Name: "kiln"}

			first := startController(t, controllerOptions{namespace: ns, electionNS: electionNS, identity: "ctl-first", clock: clocktesting.NewFakeClock(t0)})
			created := createAutonomyUnit(t, key, standby)
			e1 := waitNewEpoch(t, key, 0)
			e2 := failOverByHand(t, key, standby, e1)
			held := []int64{e1, e2}

			// Deleted while its controller runs: the deletion completes once
			// its runtime's pod is gone (the finalizer, L13).
			deleteUnit(t, created)
			first.stop()
			if tc.loseRecord {
				rec := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: electionNS, Name: holdfastv1.EpochRecordName}}
				if err := env.Client.Delete(context.Background(), rec); err != nil {
					t.Fatalf("losing the epoch record: %v", err)
				}
			}

			startController(t, controllerOptions{namespace: ns, electionNS: electionNS, identity: "ctl-next", clock: clocktesting.NewFakeClock(tc.next)})
			createAutonomyUnit(t, key, standby)
			e3 := waitNewEpoch(t, key, 0)
			for _, e := range held {
				if e3 <= e {
					t.Fatalf("the re-created unit's first epoch %d is not above epoch %d the deleted unit held (%v)", e3, e, held)
				}
			}
			if e4 := failOverByHand(t, key, standby, e3); e4 <= e3 {
				t.Fatalf("the failover after the re-creation took epoch %d, not above %d", e4, e3)
			}
			if n := len(units.PodName(key.Name, e3)); n > 63 {
				t.Fatalf("runtime pod name of %d characters is no DNS label", n)
			}
		})
	}
}

func createAutonomyUnit(t *testing.T, key types.NamespacedName, standby string) *holdfastv1.Unit {
	t.Helper()
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"},
			NodeSelector: map[string]string{"holdfast.io/device": key.Namespace},
			Availability: holdfastv1.Availability{Targets: &holdfastv1.FailoverTargets{Nodes: []string{standby}}},
		},
	}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// failOverByHand asks for a manual failover with a confirmed fence and
// returns the new binding's epoch.
func failOverByHand(t *testing.T, key types.NamespacedName, to string, from int64) int64 {
	t.Helper()
	// The person certifies the runtime they read: the controller writes a
	// binding before it creates its pod, and a confirmation of no pod says
	// nothing once the pod exists.
	poll.Until(t, 20*time.Second, fmt.Sprintf("the runtime pod of epoch %d", from), func() (bool, string) {
		return runtimePod(t, &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, from) != nil, "no pod yet"
	})
	annotate(t, key, fenceConfirmed(t, key, "the edge node powered off at its breaker", from, holdfastv1.AnnotationFailoverTo, to))
	return waitNewEpoch(t, key, from)
}

// deleteUnit deletes the unit and, as the garbage collector would, its
// runtime pods, and waits until both are gone.
func deleteUnit(t *testing.T, u *holdfastv1.Unit) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, u); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "the unit and its pods gone", func() (bool, string) {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(u.Namespace), client.MatchingLabels{holdfastv1.LabelUnit: u.Name}); err != nil {
			return false, err.Error()
		}
		var left []string
		for i := range pods.Items {
			left = append(left, pods.Items[i].Name)
			_ = env.Client.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(0))
		}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), &holdfastv1.Unit{})
		return apierrors.IsNotFound(err) && len(left) == 0, fmt.Sprintf("unit: %v, pods: %s", err, strings.Join(left, ", "))
	})
}
