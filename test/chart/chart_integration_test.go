//go:build integration

package chart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/testenv"
)

var (
	env *testenv.Env
	// auditLog is the apiserver's audit log of holdfast's service accounts.
	auditLog string
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "holdfast-chart-audit-")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(AuditPolicy), 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	auditLog = filepath.Join(dir, "audit.log")
	testenv.Main(m, &env, testenv.Options{APIServerFlags: map[string]string{
		"audit-policy-file": filepath.Join(dir, "policy.yaml"),
		"audit-log-path":    auditLog,
		"audit-log-format":  "json",
		// A webhook Service is reached through its endpoints (there are
		// none here), never by resolving <svc>.<ns>.svc through the host's
		// DNS: the apiserver must send nothing off this machine.
		"enable-aggregator-routing": "true",
	}})
}

// installMonitoringCRDs generates the Prometheus Operator's ServiceMonitor
// and PrometheusRule CRDs from its Go types with controller-gen (cached under
// bin/ by module version) and installs them, so the chart's optional objects
// meet their real schema.
func installMonitoringCRDs(t *testing.T) {
	t.Helper()
	root := repoRoot(t)
	version, err := moduleVersion(root, "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "bin", "chart-crds", "monitoring-"+version)
	if _, err := os.Stat(filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml")); err != nil {
		gen := os.Getenv("CONTROLLER_GEN")
		if gen == "" {
			matches, _ := filepath.Glob(filepath.Join(root, "bin", "tools", "controller-gen-*"))
			if len(matches) == 0 {
				t.Fatal("controller-gen is missing: run make test (it builds bin/tools/controller-gen-*)")
			}
			gen = matches[len(matches)-1]
		}
		tmp := dir + ".tmp"
		_ = os.RemoveAll(tmp)
		cmd := exec.Command(gen, "crd:maxDescLen=0", "paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1", "output:crd:dir="+tmp)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("generating the Prometheus Operator CRDs: %v\n%s", err, out)
		}
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
	}
	opts := envtest.CRDInstallOptions{Paths: []string{
		filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(dir, "monitoring.coreos.com_podmonitors.yaml"),
		filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml"),
	}, ErrorIfPathMissing: true}
	crds, err := envtest.InstallCRDs(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := envtest.WaitForCRDs(env.Config, crds, envtest.CRDInstallOptions{MaxTime: time.Minute, PollInterval: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
}

func moduleVersion(root, module string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == module {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("go.mod requires no %s", module)
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// Every object the chart renders, for the defaults and every ci/ file, is
// accepted by the real apiserver's validation (kubectl apply --dry-run=server,
// strict field validation): built-in schemas, holdfast's CRDs, the
// Prometheus Operator's CRDs, and admission.
func TestEveryRenderedManifestPassesServerDryRun(t *testing.T) {
	root := repoRoot(t)
	installMonitoringCRDs(t)
	ensureNamespace(t, Namespace)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := Cases(root)
	if err != nil {
		t.Fatal(err)
	}
	k := env.Kubectl()
	for _, c := range cases {
		ms, _, err := Render(ch, c.Values)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		path := filepath.Join(t.TempDir(), "manifest.yaml")
		if err := os.WriteFile(path, Join(ms), 0o600); err != nil {
			t.Fatal(err)
		}
		r := k.Run(t, "", "apply", "--dry-run=server", "--validate=strict", "-f", path)
		if r.ExitCode != 0 {
			t.Errorf("%s: the apiserver refuses the rendered chart:\n%s", c.Name, r)
			continue
		}
		if n := strings.Count(r.Stdout, "(server dry run)"); n != len(ms) {
			t.Errorf("%s: %d of %d objects dry-run:\n%s", c.Name, n, len(ms), r.Stdout)
		}
	}
}

// helm install against the real apiserver creates every object the chart
// renders; an upgrade keeps the webhook's certificate and the configuration's
// CA; the installed configuration fails closed for guarded changes only.
func TestHelmInstallCreatesEveryObject(t *testing.T) {
	ctx := context.Background()
	root := repoRoot(t)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t)
	inst := newInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = "holdfast", Namespace, true
	inst.Timeout = time.Minute
	rel, err := inst.Run(ch, map[string]any{})
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	uninstalled := false
	uninstall := func() {
		if uninstalled {
			return
		}
		uninstalled = true
		if _, err := newUninstall(cfg).Run("holdfast"); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	}
	t.Cleanup(uninstall)
	if rel.Info.Status != "deployed" {
		t.Fatalf("release status %s", rel.Info.Status)
	}

	ms, err := Split(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		u := &unstructured.Unstructured{Object: m.Object}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, got); err != nil {
			t.Errorf("%s %s/%s from %s was not created: %v", m.Kind, m.Namespace, m.Name, m.Source, err)
		}
	}
	var deps appsv1.DeploymentList
	if err := env.Client.List(ctx, &deps, client.InNamespace(Namespace)); err != nil {
		t.Fatal(err)
	}
	names := map[string]int32{}
	for _, d := range deps.Items {
		names[d.Name] = *d.Spec.Replicas
	}
	for _, want := range []string{"holdfast-controller-units", "holdfast-webhook", "holdfast-scheduler"} {
		if names[want] != 2 {
			t.Errorf("Deployment %s: %d replicas, want 2 (have %v)", want, names[want], names)
		}
	}

	// The configuration trusts the generated CA, and an upgrade keeps both.
	secret, vwcCA := webhookTLS(t)
	if len(secret.Data["tls.crt"]) == 0 || string(secret.Data["ca.crt"]) != string(vwcCA) {
		t.Fatalf("the configuration's caBundle is not the Secret's ca.crt")
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = Namespace
	if _, err := up.Run("holdfast", ch, map[string]any{"logVerbosity": 3}); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	after, afterCA := webhookTLS(t)
	if string(after.Data["tls.crt"]) != string(secret.Data["tls.crt"]) || string(afterCA) != string(vwcCA) {
		t.Errorf("helm upgrade replaced the webhook's certificate; the apiserver would distrust running pods")
	}

	// Installed, with no webhook pod to answer (no kubelet here): guarded
	// changes fail closed, ordinary traffic never reaches it.
	ns := env.Namespace(t)
	unit := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln-1"},
		Spec:       holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: "x"}, NodeSelector: map[string]string{"a": "b"}},
	}
	if err := env.Client.Create(ctx, unit); err == nil || !strings.Contains(err.Error(), "units.holdfast.io") {
		t.Errorf("creating a Unit with the webhook unreachable: %v; want a refusal naming units.holdfast.io", err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "chart-edge-1", Labels: map[string]string{"topology.kubernetes.io/zone": "a"}}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Errorf("an ordinary Node create reached the webhook: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, node) })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Errorf("a ConfigMap create failed: %v", err)
	}

	uninstall()
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "holdfast-webhook"}, &vwc); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall the configuration is still there: %v", err)
	}
	// crds.keep: the CRDs, and with them every Unit, stay.
	for _, name := range []string{"units.holdfast.io", "voterpolicies.holdfast.io", "voterswaps.holdfast.io"} {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil || crd.DeletionTimestamp != nil {
			t.Errorf("helm uninstall must leave CRD %s (and every object of its kind) in place: %v", name, err)
		}
	}
}

func webhookTLS(t *testing.T) (*corev1.Secret, []byte) {
	t.Helper()
	ctx := context.Background()
	var s corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "holdfast-webhook-tls"}, &s); err != nil {
		t.Fatal(err)
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "holdfast-webhook"}, &vwc); err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) < 7 {
		t.Fatalf("the configuration has %d webhooks", len(vwc.Webhooks))
	}
	for _, w := range vwc.Webhooks[1:] {
		if string(w.ClientConfig.CABundle) != string(vwc.Webhooks[0].ClientConfig.CABundle) {
			t.Fatalf("webhook %s trusts another CA", w.Name)
		}
	}
	return &s, vwc.Webhooks[0].ClientConfig.CABundle
}

// newInstall is helm install that adopts holdfast's CRDs (helm install
// --take-ownership): the test apiserver starts with them installed
// (testenv), as a cluster that ran an earlier chart has them.
func newInstall(cfg *action.Configuration) *action.Install {
	inst := action.NewInstall(cfg)
	inst.TakeOwnership = true
	return inst
}

// newUninstall is helm uninstall --no-hooks: no kubelet runs the uninstall
// guard's Job here (TestTheUninstallGuardHookRefusesUnderItsOwnGrants runs
// its container's command instead).
func newUninstall(cfg *action.Configuration) *action.Uninstall {
	u := action.NewUninstall(cfg)
	u.DisableHooks = true
	return u
}

// helmConfig is helm's action configuration against the test apiserver,
// storing releases as Secrets like the helm CLI does.
func helmConfig(t *testing.T) *action.Configuration {
	t.Helper()
	return helmConfigIn(t, Namespace)
}

// helmConfigIn is helmConfig for releases in namespace ns.
func helmConfigIn(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	return helmConfigOf(t, env.Kubeconfig, ns)
}

// helmConfigOf is helmConfigIn on the apiserver kubeconfig reaches.
func helmConfigOf(t *testing.T, kubeconfig, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &ns
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, ns, "secret", func(format string, v ...any) { t.Logf("helm: "+format, v...) }); err != nil {
		t.Fatal(err)
	}
	return cfg
}
