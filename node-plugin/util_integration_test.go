//go:build integration

package nodeplugin_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var errNotExist = fs.ErrNotExist

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// counter is the value of name's series with exactly labels in the
// registry holdfast-node serves on its metrics port (0 before its first
// count). The tests of the package share the process's registry: read it
// before and after.
func counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// reportCounts reads holdfast_node_reports_total of every kind with result.
func reportCounts(t testing.TB, result string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, k := range []string{"provisioned", "role", "tombstone", "fitness"} {
		out[k] = counter(t, "holdfast_node_reports_total", map[string]string{"kind": k, "result": result})
	}
	return out
}

// rose is after - before, by key.
func rose(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}
