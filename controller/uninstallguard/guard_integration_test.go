//go:build integration

package uninstallguard

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.Options{}) }

func createUnit(ctx context.Context, t *testing.T, c client.Client, ns, name string, mode holdfastv1.AvailabilityMode) *holdfastv1.Unit {
	t.Helper()
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: holdfastv1.UnitSpec{
			Runtime:      holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"},
			NodeSelector: map[string]string{"holdfast.io/device": name},
			Availability: holdfastv1.Availability{Mode: mode},
		},
	}
	if mode == holdfastv1.Failover {
		u.Spec.Availability.Targets = &holdfastv1.FailoverTargets{Nodes: []string{"standby-1"}}
	}
	if err := c.Create(ctx, u); err != nil {
		t.Fatalf("creating Unit %s/%s: %v", ns, name, err)
	}
	return u
}

// The guard, against the real apiserver: no Unit, or Autonomy Units only,
// let the uninstall go on; Failover Units in any namespace refuse it, each
// named, with the fix; once they are deleted it goes on again.
func TestTheUninstallGuardRefusesWhileFailoverUnitsRun(t *testing.T) {
	ctx := context.Background()
	rel := Release{Name: "holdfast", Namespace: "holdfast-system"}
	if err := Check(ctx, env.Client, rel); err != nil {
		t.Fatalf("no Unit at all: %v", err)
	}
	a, b := env.Namespace(t), env.Namespace(t)
	createUnit(ctx, t, env.Client, a, "press-2", holdfastv1.Autonomy)
	if err := Check(ctx, env.Client, rel); err != nil {
		t.Fatalf("an Autonomy Unit never fences, the uninstall goes on: %v", err)
	}

	kiln := createUnit(ctx, t, env.Client, a, "kiln-1", holdfastv1.Failover)
	oven := createUnit(ctx, t, env.Client, b, "oven-3", holdfastv1.Failover)
	err := Check(ctx, env.Client, rel)
	if err == nil {
		t.Fatal("two Failover Units run and the guard let the uninstall go on")
	}
	for _, want := range []string{a + "/kiln-1", b + "/oven-3", "2 Unit(s) run in Failover mode",
		"helm uninstall holdfast -n holdfast-system --no-hooks", "Delete those Units first", "helm rollback holdfast REVISION -n holdfast-system"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "press-2") {
		t.Errorf("the refusal names the Autonomy Unit:\n%v", err)
	}

	for _, u := range []*holdfastv1.Unit{kiln, oven} {
		if err := env.Client.Delete(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	// The guard reads the apiserver: the deletions it sees are the ones
	// made above (no finalizer holds a Unit here, nothing runs a controller).
	if err := Check(ctx, env.Client, rel); err != nil {
		t.Errorf("the Failover Units are deleted, the uninstall goes on: %v", err)
	}
}
