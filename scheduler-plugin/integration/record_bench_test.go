//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// recordWritesPerRound is how many Unit records each form makes per round.
const recordWritesPerRound = 200

// BenchmarkUnitRecordWrite measures what one runtime's L7 record costs the
// apiserver, etcd and the writer, in CPU per write, for two forms of the
// resourceVersion-conditioned write: the update of the Unit's status that
// UnitPlacement's Bind sends, and a JSON merge patch of the three fields it
// records carrying the resourceVersion read (as conditioned; the request
// carries three fields, not the whole Unit). The patch was measured to cost
// kube-apiserver as much as the update (docs/benchmarks.md), so Bind keeps
// the update; the benchmark keeps the comparison to be re-run. Each of b.N rounds makes 200 writes of
// each form on the throughput benchmark's 100 units (16 writers at a time,
// each write from the copy the previous one returned, as Bind writes from
// the informer's), alternating which form goes first, so that the machine's
// load falls on both. Run it with
//
//	go test -tags integration -run '^$' -bench UnitRecordWrite -benchtime 5x ./scheduler-plugin/integration/
func BenchmarkUnitRecordWrite(b *testing.B) {
	b.StopTimer()
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(restConfig(benchQPS))
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "record-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ns := nsObj.Name
	units := make([]*holdfastv1.Unit, benchUnits)
	locks := make([]sync.Mutex, benchUnits)
	err = parallel(benchUnits, func(u int) error {
		unit, binding := benchUnit(ns, u)
		if err := env.Client.Create(ctx, unit); err != nil {
			return err
		}
		unit.Status.RuntimeBinding = &binding
		units[u] = unit
		return env.Client.Status().Update(ctx, unit)
	})
	if err != nil {
		b.Fatalf("creating units: %v", err)
	}
	defer func() {
		if err := env.Client.DeleteAllOf(ctx, &holdfastv1.Unit{}, client.InNamespace(ns)); err != nil {
			b.Errorf("deleting the units: %v", err)
		}
	}()

	write := map[string]func(u *holdfastv1.Unit, node string) error{
		"update": func(u *holdfastv1.Unit, node string) error {
			bind := u.Status.RuntimeBinding
			bind.Node, bind.Pod, bind.BoundAt = node, "pod-"+node, &metav1.Time{Time: metav1.Now().Time}
			return env.Client.Status().Update(ctx, u)
		},
		"patch": func(u *holdfastv1.Unit, node string) error {
			// As conditioned as the update: the apiserver refuses the
			// patch with a conflict when resourceVersion is not current.
			patch, err := json.Marshal(map[string]any{
				"metadata": map[string]string{"resourceVersion": u.ResourceVersion},
				"status": map[string]any{"runtimeBinding": map[string]any{
					"node": node, "pod": "pod-" + node, "boundAt": metav1.Now(),
				}},
			})
			if err != nil {
				return err
			}
			return env.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
		},
	}
	forms := []string{"update", "patch"}
	cpu := map[string]map[string]float64{}
	seq := 0
	for i := range b.N {
		for j := range forms {
			form := forms[(i+j)%2]
			before, err := cpuTimes()
			if err != nil {
				b.Fatal(err)
			}
			writesBefore, err := apiserverWrites(ctx, cs)
			if err != nil {
				b.Fatal(err)
			}
			seq++
			b.StartTimer()
			err = parallel(recordWritesPerRound, func(k int) error {
				// One writer per unit at a time, from the copy the
				// last write returned: no conflicts to retry.
				locks[k%benchUnits].Lock()
				defer locks[k%benchUnits].Unlock()
				return write[form](units[k%benchUnits], fmt.Sprintf("node-%d-%d", seq, k))
			})
			b.StopTimer()
			if err != nil {
				b.Fatalf("%s: %v", form, err)
			}
			after, err := cpuTimes()
			if err != nil {
				b.Fatal(err)
			}
			writesAfter, err := apiserverWrites(ctx, cs)
			if err != nil {
				b.Fatal(err)
			}
			if cpu[form] == nil {
				cpu[form] = map[string]float64{}
			}
			var line []string
			for _, k := range slices.Sorted(maps.Keys(after)) {
				d := after[k] - before[k]
				cpu[form][k] += d
				line = append(line, fmt.Sprintf("%s %.0fµs", k, d*1e6/recordWritesPerRound))
			}
			verb := map[string]string{"update": "PUT units/status", "patch": "PATCH units/status"}[form]
			benchLog(b, "round %d/%d %s: %.0f %s, CPU per write: %s", i+1, b.N, form, writesAfter[verb]-writesBefore[verb], verb, strings.Join(line, ", "))
		}
	}
	writes := float64(b.N * recordWritesPerRound)
	for _, form := range forms {
		var total float64
		for k, s := range cpu[form] {
			total += s
			b.ReportMetric(s*1e6/writes, form+"-"+strings.ReplaceAll(k, "+", "-")+"-µs/write")
		}
		b.ReportMetric(total*1e6/writes, form+"-all-µs/write")
	}
}
