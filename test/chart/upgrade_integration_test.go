//go:build integration

package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/testenv"
)

// previousChart is the packaged chart of the previous release
// (test/chart/testdata/README.md; hack/chart-fixture.sh refreshes it).
const previousChart = "testdata/holdfast-previous.tgz"

var holdfastCRDs = []string{"units.holdfast.io", "voterpolicies.holdfast.io", "voterswaps.holdfast.io"}

// takeOutWebhookConfiguration deletes the chart's webhook configuration,
// which no webhook pod answers here (it fails closed for Units); a cluster
// has the webhook running.
func takeOutWebhookConfiguration(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "holdfast-webhook"}}
	if err := c.Delete(ctx, vwc); err != nil {
		t.Fatal(err)
	}
}

// generatedCRD reads the CRD make generate wrote for name.
func generatedCRD(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.CRDDir, "holdfast.io_"+strings.TrimSuffix(name, ".holdfast.io")+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

// TestChartUpgradeFromThePreviousVersion installs the previous release's
// packaged chart on a control plane of its own, without holdfast's CRDs (its
// CRDs come from its crds/, installed once by Helm), creates a
// Failover and an Autonomy Unit with a bound runtime, adopts the CRDs into
// the release as docs/operations.md says, and helm-upgrades to this tree's
// chart. Asserted:
//   - every CRD now serves the generated schema, keep-annotated, and a field
//     only the new Unit schema has (status.runtimeBinding.handOver.podGoneAt,
//     pruned by the previous schema) is stored;
//   - the Units are untouched: same UID, resourceVersion (not rewritten),
//     spec and status (binding epoch, lease state);
//   - nothing that fences a running unit: the grantor's election Lease is
//     untouched (no forced leader change), the lease CA Secret keeps its key
//     and certificate (runtime pods trust it), and the units role's
//     Deployment is updated in place (same UID, never recreated) with a
//     rolling update that starts a new pod and waits for it to be ready
//     before it stops an old one (maxUnavailable 0, maxSurge 1, 2 replicas,
//     a PodDisruptionBudget of minAvailable 1), so a standby is always there
//     to take the election when the leader stands down. The rollout itself
//     needs kubelets (the chart-installed e2e drills run the grantor's
//     leader change under load).
func TestChartUpgradeFromThePreviousVersion(t *testing.T) {
	ctx := context.Background()
	root := repoRoot(t)
	cluster, err := testenv.Start(testenv.Options{WithoutCRDs: true,
		// As the package's own control plane: the webhook Service is
		// reached through its endpoints, never through the host's DNS.
		APIServerFlags: map[string]string{"enable-aggregator-routing": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping the upgrade's control plane: %v", err)
		}
	})
	c := cluster.Client
	prev, err := loader.Load(previousChart)
	if err != nil {
		t.Fatal(err)
	}
	if len(prev.CRDObjects()) == 0 {
		t.Fatalf("%s has no crds/: it is not a chart from before the CRDs became templates", previousChart)
	}
	cfg := helmConfigOf(t, cluster.Kubeconfig, Namespace)
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace, inst.Timeout = "holdfast", Namespace, true, time.Minute
	if _, err := inst.Run(prev, map[string]any{}); err != nil {
		t.Fatalf("helm install of the previous chart %s: %v", prev.Metadata.Version, err)
	}
	t.Cleanup(func() {
		if _, err := newUninstall(cfg).Run("holdfast"); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	takeOutWebhookConfiguration(ctx, t, c)

	// Units with a bound runtime, as the grantor records them.
	ns := cluster.Namespace(t)
	kiln := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln-1"},
		Spec: holdfastv1.UnitSpec{
			Runtime: holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"}, NodeSelector: map[string]string{"holdfast.io/device": "kiln-1"},
			Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, Targets: &holdfastv1.FailoverTargets{Nodes: []string{"edge-2"}}},
		},
	}
	press := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "press-2"},
		Spec: holdfastv1.UnitSpec{
			Runtime: holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"}, NodeSelector: map[string]string{"holdfast.io/device": "press-2"},
		},
	}
	for _, u := range []*holdfastv1.Unit{kiln, press} {
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("creating Unit %s under the previous chart's CRDs: %v", u.Name, err)
		}
	}
	gone := metav1.NewTime(time.Now().Truncate(time.Second))
	kiln.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{
		Node: "edge-1", Epoch: 3, Pod: "kiln-1-runtime-e3", LeaseState: holdfastv1.LeaseHeld, LeaseStateEpoch: 3,
		HandOver: &holdfastv1.HandOver{Reason: "spec.runtime.image", Since: gone, PodGoneAt: &gone},
	}
	if err := c.Status().Update(ctx, kiln); err != nil {
		t.Fatal(err)
	}
	if kiln.Status.RuntimeBinding.HandOver.PodGoneAt != nil {
		t.Fatalf("the previous chart's Unit schema stores handOver.podGoneAt: %s no longer predates it; probe a field it lacks", previousChart)
	}

	// The running grantor's leader, as its election Lease records it.
	election := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "holdfast-grantor"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("holdfast-controller-units-0"), LeaseDurationSeconds: ptr.To[int32](6),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if err := c.Create(ctx, election); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, election) })

	type snapshot struct {
		units      map[string]holdfastv1.Unit
		grantor    appsv1.Deployment
		leaseCA    corev1.Secret
		electionRV string
	}
	take := func() snapshot {
		t.Helper()
		s := snapshot{units: map[string]holdfastv1.Unit{}}
		for _, name := range []string{"kiln-1", "press-2"} {
			var u holdfastv1.Unit
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
				t.Fatal(err)
			}
			s.units[name] = u
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "holdfast-controller-units"}, &s.grantor); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "holdfast-lease-ca"}, &s.leaseCA); err != nil {
			t.Fatal(err)
		}
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "holdfast-grantor"}, &l); err != nil {
			t.Fatal(err)
		}
		s.electionRV = l.ResourceVersion
		return s
	}
	before := take()

	// docs/operations.md: the CRDs the previous chart installed from crds/
	// carry no release; label and annotate them so helm upgrade adopts them.
	k := cluster.Kubectl()
	k.MustRun(t, "", append(append([]string{"label", "crd"}, holdfastCRDs...), "app.kubernetes.io/managed-by=Helm")...)
	k.MustRun(t, "", append(append([]string{"annotate", "crd"}, holdfastCRDs...),
		"meta.helm.sh/release-name=holdfast", "meta.helm.sh/release-namespace="+Namespace)...)

	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout = Namespace, time.Minute
	if _, err := up.Run("holdfast", ch, map[string]any{}); err != nil {
		t.Fatalf("helm upgrade from the previous chart %s: %v", prev.Metadata.Version, err)
	}
	after := take()

	// The schemas are this tree's.
	for _, name := range holdfastCRDs {
		var live apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &live); err != nil {
			t.Fatal(err)
		}
		want := generatedCRD(t, name)
		if len(live.Spec.Versions) != len(want.Spec.Versions) {
			t.Errorf("CRD %s serves %d versions, the chart %d", name, len(live.Spec.Versions), len(want.Spec.Versions))
			continue
		}
		for i := range want.Spec.Versions {
			if !equality.Semantic.DeepEqual(live.Spec.Versions[i].Schema, want.Spec.Versions[i].Schema) {
				t.Errorf("CRD %s version %s: the upgrade left the previous schema", name, want.Spec.Versions[i].Name)
			}
		}
		if live.Annotations["helm.sh/resource-policy"] != "keep" || live.Annotations["meta.helm.sh/release-name"] != "holdfast" {
			t.Errorf("CRD %s annotations %v: want it kept through uninstall and owned by the release", name, live.Annotations)
		}
	}

	// The Units are as they were: not rewritten, spec and status intact.
	for name, b := range before.units {
		a := after.units[name]
		if a.UID != b.UID || a.ResourceVersion != b.ResourceVersion || !equality.Semantic.DeepEqual(a.Spec, b.Spec) ||
			!equality.Semantic.DeepEqual(a.Status, b.Status) {
			t.Errorf("Unit %s changed across the upgrade:\nbefore %+v\nafter  %+v", name, b, a)
		}
	}
	// A field only the new schema has is stored now.
	takeOutWebhookConfiguration(ctx, t, c)
	k2 := after.units["kiln-1"]
	// The apiserver calls a deleted webhook until its admission
	// configuration catches up: the write is tried until it is admitted.
	poll.Until(t, 30*time.Second, "the status write admitted without the webhook", func() (bool, string) {
		k2 = after.units["kiln-1"]
		if err := c.Get(ctx, client.ObjectKeyFromObject(&k2), &k2); err != nil {
			return false, err.Error()
		}
		k2.Status.RuntimeBinding.HandOver.PodGoneAt = &gone
		err := c.Status().Update(ctx, &k2)
		return err == nil, fmt.Sprint(err)
	})
	if p := k2.Status.RuntimeBinding.HandOver.PodGoneAt; p == nil || !p.Equal(&gone) {
		t.Errorf("after the upgrade handOver.podGoneAt is %v, want %v stored", p, gone)
	}

	// Nothing that would fence a running unit.
	if after.electionRV != before.electionRV {
		t.Errorf("the upgrade wrote the grantor's election Lease (resourceVersion %s -> %s)", before.electionRV, after.electionRV)
	}
	for _, key := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if string(after.leaseCA.Data[key]) != string(before.leaseCA.Data[key]) {
			t.Errorf("the upgrade replaced the lease CA's %s: runtimes would refuse the grantor's renewals and fence", key)
		}
	}
	g := after.grantor
	if g.UID != before.grantor.UID {
		t.Errorf("the upgrade recreated the units role's Deployment: every grantor pod stops at once")
	}
	ru := g.Spec.Strategy.RollingUpdate
	if g.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 ||
		ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 || g.Spec.Replicas == nil || *g.Spec.Replicas != 2 {
		t.Errorf("the units role's Deployment rolls with %+v at %v replicas; want a rolling update with maxUnavailable 0, maxSurge 1 on 2 replicas",
			g.Spec.Strategy, g.Spec.Replicas)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "holdfast-controller-units"}, &pdb); err != nil {
		t.Errorf("the units role's PodDisruptionBudget: %v", err)
	} else if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("the units role's PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
}
