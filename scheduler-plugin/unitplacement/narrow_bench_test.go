package unitplacement

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

func BenchmarkPreFilter5000Nodes(b *testing.B) {
	var nodes []*corev1.Node
	for i := range 5000 {
		w := plugintest.ReadyNode(fmt.Sprintf("n-%04d", i)).Label("bench-rack", fmt.Sprintf("rack-%d", i/50))
		if i >= 4500 {
			w = w.Label("bench-spares", fmt.Sprintf("spares-%d", i%10))
		}
		nodes = append(nodes, w.Obj())
	}
	for _, tc := range []struct {
		name    string
		binding holdfastv1.RuntimeBinding
	}{
		{"first", holdfastv1.RuntimeBinding{Epoch: 1}},
		{"rebind", holdfastv1.RuntimeBinding{Epoch: 1, PreviousNode: "n-0003", UnsettledRebinds: []string{"n-4503", "n-4553"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			u := plugintest.MakeUnit(ns, "unit-3").TargetSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"bench-spares": "spares-3"}}).Authorised(tc.binding).Obj()
			u.Spec.NodeSelector = map[string]string{"bench-rack": "rack-3"}
			c := plugintest.Client(interceptor.Funcs{}, u)
			// PreFilter is given the snapshot's nodes and judges the
			// candidates the index names on that same snapshot, as in the
			// scheduler.
			fh, _ := plugintest.Handle(b, nodes, nil)
			infos, err := fh.SnapshotSharedLister().NodeInfos().List()
			if err != nil {
				b.Fatal(err)
			}
			args, _ := getArgs(nil)
			pl, err := newPlugin(context.Background(), fh, args, c, c, indexOf(b, fh), nil)
			if err != nil {
				b.Fatal(err)
			}
			pod := plugintest.RuntimePod(ns, "unit-3", 1).Obj()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, status := pl.PreFilter(context.Background(), framework.NewCycleState(), pod, infos); !status.IsSuccess() {
					b.Fatal(status)
				}
			}
		})
	}
}
