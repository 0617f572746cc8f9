//go:build integration

package chart

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
)

// The chart as make release ships it: helm package of charts/holdfast,
// rendered from the .tgz as helm template does, is applied server-side
// (kubectl apply --server-side: the apiserver merges, validates strictly and
// admits every object, holdfast's CRDs among them) and applied again
// unchanged; its hooks pass a server-side dry run.
func TestThePackagedChartPassesServerSideApply(t *testing.T) {
	root := repoRoot(t)
	installMonitoringCRDs(t)
	ensureNamespace(t, Namespace)
	// A namespace of its own: the lease CA Secret an earlier install kept
	// (helm.sh/resource-policy: keep) holds another CA than this render's.
	ns := env.Namespace(t)
	pkg := action.NewPackage()
	pkg.Destination = t.TempDir()
	tgz, err := pkg.Run(Dir(root), nil)
	if err != nil {
		t.Fatalf("helm package: %v", err)
	}
	ch, err := loader.Load(tgz)
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := RenderIn(ch, ns, map[string]any{}, APIVersions)
	if err != nil {
		t.Fatalf("helm template %s: %v", filepath.Base(tgz), err)
	}
	hooks, err := RenderHooks(ch, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	crds := 0
	var rest []Manifest
	for _, m := range ms {
		if m.Kind == "CustomResourceDefinition" {
			crds++
			continue
		}
		rest = append(rest, m)
	}
	if crds != len(holdfastCRDs) {
		t.Errorf("the packaged chart renders %d CRDs, want %d", crds, len(holdfastCRDs))
	}
	dir := t.TempDir()
	all, objects, hookFile := filepath.Join(dir, "all.yaml"), filepath.Join(dir, "objects.yaml"), filepath.Join(dir, "hooks.yaml")
	for path, set := range map[string][]Manifest{all: ms, objects: rest, hookFile: hooks} {
		if err := os.WriteFile(path, Join(set), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k := env.Kubectl()
	// The CRDs stay (crds.keep); everything else goes at the end.
	t.Cleanup(func() { k.Run(t, "", "delete", "--ignore-not-found", "--wait=false", "-f", objects) })
	apply := []string{"apply", "--server-side", "--field-manager=holdfast-package-check", "--validate=strict", "-f", all}
	r := k.Run(t, "", apply...)
	if r.ExitCode != 0 {
		t.Fatalf("the apiserver refuses the packaged chart's server-side apply:\n%s", r)
	}
	if n := strings.Count(r.Stdout, "serverside-applied"); n != len(ms) {
		t.Errorf("%d of %d objects applied:\n%s", n, len(ms), r.Stdout)
	}
	if r := k.Run(t, "", apply...); r.ExitCode != 0 {
		t.Errorf("a second server-side apply of the same chart is refused:\n%s", r)
	}
	r = k.Run(t, "", "apply", "--server-side", "--dry-run=server", "--field-manager=holdfast-package-check", "--validate=strict", "-f", hookFile)
	if r.ExitCode != 0 || strings.Count(r.Stdout, "(server dry run)") != len(hooks) {
		t.Errorf("the packaged chart's hooks (%d) fail a server-side dry run:\n%s", len(hooks), r)
	}
}

// The uninstall guard as the chart runs it: its hook ServiceAccount and
// grant applied to the real apiserver, the real holdfast-controller with the
// Job's args and that ServiceAccount's token. A Failover Unit makes it exit
// non-zero with a message naming the Unit and the fix; once the Unit is
// deleted it no longer names it, and exits zero when no Failover Unit is
// left in the cluster.
func TestTheUninstallGuardHookRefusesUnderItsOwnGrants(t *testing.T) {
	ctx := context.Background()
	root := repoRoot(t)
	ensureNamespace(t, Namespace)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := RenderHooks(ch, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var grants []Manifest
	for _, h := range hooks {
		if h.Kind != "Job" {
			grants = append(grants, h)
		}
	}
	path := filepath.Join(t.TempDir(), "grants.yaml")
	if err := os.WriteFile(path, Join(grants), 0o600); err != nil {
		t.Fatal(err)
	}
	k := env.Kubectl()
	k.MustRun(t, "", "apply", "--server-side", "--field-manager=holdfast-guard-check", "-f", path)
	t.Cleanup(func() { k.Run(t, "", "delete", "--ignore-not-found", "-f", path) })

	bin := buildBinary(t, root, "./cmd/holdfast-controller")
	args := override(containerArgs(t, hooks, "uninstall-guard"), map[string]string{
		"kubeconfig": serviceAccountKubeconfig(ctx, t, "holdfast-uninstall-guard")})
	run := func() (int, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &exit):
			return exit.ExitCode(), string(out)
		}
		t.Fatal(err)
		return 0, ""
	}

	ns := env.Namespace(t)
	unit := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln-1"},
		Spec: holdfastv1.UnitSpec{
			Runtime: holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"}, NodeSelector: map[string]string{"holdfast.io/device": "kiln-1"},
			Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, Targets: &holdfastv1.FailoverTargets{Nodes: []string{"edge-2"}}},
		},
	}
	if err := env.Client.Create(ctx, unit); err != nil {
		t.Fatal(err)
	}
	code, out := run()
	if code == 0 || !strings.Contains(out, ns+"/kiln-1") || !strings.Contains(out, "helm uninstall holdfast -n "+Namespace+" --no-hooks") {
		t.Fatalf("with Failover Unit %s/kiln-1 the guard exits %d:\n%s\nwant non-zero, naming the Unit and the fix", ns, code, out)
	}
	if strings.Contains(out, "forbidden") {
		t.Fatalf("the guard's grant does not cover its read:\n%s", out)
	}

	if err := env.Client.Delete(ctx, unit); err != nil {
		t.Fatal(err)
	}
	code, out = run()
	if strings.Contains(out, ns+"/kiln-1") {
		t.Errorf("the deleted Unit is still named:\n%s", out)
	}
	// Other tests of this package leave Units in namespaces the test
	// apiserver never finishes deleting (no namespace controller runs).
	var left holdfastv1.UnitList
	if err := env.Client.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	failover := 0
	for _, u := range left.Items {
		if u.Spec.Availability.Mode == holdfastv1.Failover {
			failover++
		}
	}
	if (failover == 0) != (code == 0) {
		t.Errorf("%d Failover Units left in the cluster, and the guard exits %d:\n%s", failover, code, out)
	}
}
