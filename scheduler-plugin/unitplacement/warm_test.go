package unitplacement

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

// A warm standby pod lands only on the node its label names, and only when
// that node is an eligible standby of its unit (which keeps warm standbys),
// Ready, not cordoned and not the node its unit is bound to.
func TestAWarmPodLandsOnlyOnTheEligibleStandbyItNames(t *testing.T) {
	boundAt := func(node string) holdfastv1.RuntimeBinding {
		return holdfastv1.RuntimeBinding{Epoch: 3, Node: node, Pod: "boiler-1-runtime-e3", Origin: holdfastv1.OriginInitial}
	}
	kept := refused + "the warm standby of unit boiler-1 is kept on node "
	for _, tc := range []struct {
		name      string
		unit      *holdfastv1.Unit
		node      string
		prefilter string            // PreFilter's status when no node fits
		want      map[string]string // Filter per node otherwise
	}{
		{
			name: "a Ready designated standby",
			unit: boiler().WarmStandby().Authorised(boundAt("primary-1")).Obj(),
			node: "spare-1",
			want: map[string]string{
				"primary-1": kept + "spare-1", "primary-2": kept + "spare-1",
				"standby-1": kept + "spare-1", "standby-2": kept + "spare-1", "standby-3": kept + "spare-1", "standby-4": kept + "spare-1",
				"spare-1": "Success", "other": kept + "spare-1",
			},
		},
		{
			name: "before the first binding",
			unit: boiler().WarmStandby().Obj(),
			node: "standby-1",
			want: map[string]string{
				"primary-1": kept + "standby-1", "primary-2": kept + "standby-1",
				"standby-1": "Success", "standby-2": kept + "standby-1", "standby-3": kept + "standby-1", "standby-4": kept + "standby-1",
				"spare-1": kept + "standby-1", "other": kept + "standby-1",
			},
		},
		{
			name:      "a cordoned standby",
			unit:      boiler().WarmStandby().Authorised(boundAt("primary-1")).Obj(),
			node:      "standby-2",
			prefilter: refused + "1 cordoned, 7 the warm standby of unit boiler-1 is kept on node standby-2",
		},
		{
			name:      "a NotReady standby",
			unit:      boiler().WarmStandby().Targets("primary-2").Authorised(boundAt("primary-1")).Obj(),
			node:      "primary-2",
			prefilter: refused + "1 not ready, 7 the warm standby of unit boiler-1 is kept on node primary-2",
		},
		{
			name:      "a node that is no standby of the unit",
			unit:      boiler().WarmStandby().Authorised(boundAt("primary-1")).Obj(),
			node:      "other",
			prefilter: refused + "1 node other is not a designated standby of unit boiler-1 (spec.availability.targets), 7 the warm standby of unit boiler-1 is kept on node other",
		},
		{
			name:      "the node the unit is bound to",
			unit:      boiler().WarmStandby().Authorised(boundAt("standby-1")).Obj(),
			node:      "standby-1",
			prefilter: refused + "1 node standby-1 is where unit boiler-1 is bound; a warm standby is kept on another designated standby, 7 the warm standby of unit boiler-1 is kept on node standby-1",
		},
		{
			name:      "a unit that keeps no warm standby",
			unit:      boiler().Authorised(boundAt("primary-1")).Obj(),
			node:      "standby-1",
			prefilter: refused + "1 unit boiler-1 keeps no warm standby: set spec.availability.warmStandby on a Failover unit, 7 the warm standby of unit boiler-1 is kept on node standby-1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := plugintest.WarmPod(ns, "boiler-1", tc.node).Obj()
			if tc.prefilter != "" {
				_, status := preFilterAll(t, tc.unit, pod)
				if got := statusString(status); got != tc.prefilter {
					t.Fatalf("PreFilter = %q, want %q", got, tc.prefilter)
				}
				return
			}
			if diff := cmp.Diff(tc.want, filterAll(t, tc.unit, pod)); diff != "" {
				t.Errorf("Filter per node (-want +got):\n%s", diff)
			}
		})
	}
}

// A warm pod holds no epoch: its Bind binds the pod and writes nothing to
// its unit's binding; when the unit was re-bound to that node since the
// pod's PreFilter, Bind refuses it and binds nothing.
func TestAWarmPodsBindTouchesNoBinding(t *testing.T) {
	binding := holdfastv1.RuntimeBinding{Epoch: 3, Node: "primary-1", Pod: "boiler-1-runtime-e3", Origin: holdfastv1.OriginInitial}
	for _, tc := range []struct {
		name    string
		binding holdfastv1.RuntimeBinding
		want    string
		bound   []string
	}{
		{name: "on its standby", binding: binding, want: "Success", bound: []string{holdfastv1.WarmPodName("boiler-1", "standby-1") + " on standby-1"}},
		{name: "re-bound there meanwhile", want: refused + "node standby-1: node standby-1 is where unit boiler-1 is bound; a warm standby is kept on another designated standby",
			binding: holdfastv1.RuntimeBinding{Epoch: 4, Node: "standby-1", PreviousNode: "primary-1", Pod: "boiler-1-runtime-e4", Origin: holdfastv1.OriginAutomatic}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unit := boiler().WarmStandby().Authorised(tc.binding).Obj()
			var writes int
			c := plugintest.Client(countingUpdates(&writes, nil), unit)
			pl, fh := build(t, c)
			bound := bindings(fh, nil)
			pod := plugintest.WarmPod(ns, "boiler-1", "standby-1").Obj()
			if got := statusString(pl.Bind(context.Background(), framework.NewCycleState(), pod, "standby-1")); got != tc.want {
				t.Fatalf("Bind = %q, want %q", got, tc.want)
			}
			if writes != 0 {
				t.Errorf("a warm pod's Bind wrote the Unit %d times", writes)
			}
			if diff := cmp.Diff(&tc.binding, getUnit(t, c).Status.RuntimeBinding); diff != "" {
				t.Errorf("binding (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.bound, *bound); diff != "" {
				t.Errorf("pods/binding (-want +got):\n%s", diff)
			}
		})
	}
}
