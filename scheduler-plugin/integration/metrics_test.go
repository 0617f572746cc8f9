//go:build integration

package integration

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/scheduler-plugin/internal/plugintest"
)

// TestPluginsCountRefusalsAndBindingRecords: a re-bind's cycle counts each
// node UnitPlacement refused by its reason class, and the binding record by
// its outcome, in the registry kube-scheduler serves on /metrics.
func TestPluginsCountRefusalsAndBindingRecords(t *testing.T) {
	p := newPlant(t)
	p.node("mx-primary", label(device, "boiler-1")) // the node being left
	p.node("mx-standby-down", notReady)
	p.node("mx-standby-tried")
	p.node("mx-standby-ok")
	p.node("mx-other")
	p.unit(plugintest.MakeUnit("", "boiler-1").Targets("mx-standby-down", "mx-standby-tried", "mx-standby-ok").Obj(),
		&holdfastv1.RuntimeBinding{Epoch: 2, Origin: holdfastv1.OriginAutomatic, PreviousNode: "mx-primary", UnsettledRebinds: []string{"mx-standby-tried"}})
	startHoldfastScheduler(t)
	refusal := func(reason string) float64 {
		return sample(t, "holdfast_scheduler_filter_refusals_total", map[string]string{"plugin": "UnitPlacement", "reason": reason})
	}
	record := func(outcome string) float64 {
		return sample(t, "holdfast_scheduler_binding_records_total", map[string]string{"outcome": outcome})
	}
	// Earlier tests of the package share the process's registry.
	before := map[string]float64{}
	for _, r := range []string{"node_being_left", "tried", "not_ready", "not_primary", "bound_elsewhere"} {
		before[r] = refusal(r)
	}
	recorded, refused := record("recorded"), record("refused")

	pod := p.runtimePod("boiler-1", 2, "")
	if got := p.boundNode(pod.Name); got != "mx-standby-ok" {
		t.Fatalf("re-bind landed on %s, want mx-standby-ok", got)
	}
	for _, r := range []string{"node_being_left", "tried", "not_ready"} {
		if d := refusal(r) - before[r]; d < 1 {
			t.Errorf("refusals with reason %s rose by %v, want at least 1", r, d)
		}
	}
	for _, r := range []string{"not_primary", "bound_elsewhere"} {
		if d := refusal(r) - before[r]; d != 0 {
			t.Errorf("a re-bind to a target counted %v refusals as %s", d, r)
		}
	}
	if d := record("recorded") - recorded; d != 1 {
		t.Errorf("binding records with outcome recorded rose by %v, want 1", d)
	}
	if d := record("refused") - refused; d != 0 {
		t.Errorf("binding records with outcome refused rose by %v, want 0", d)
	}
}

// sample is the value of name's series with exactly labels in
// kube-scheduler's legacy registry (0 when it has none yet).
func sample(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
