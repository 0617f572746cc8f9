//go:build integration

package chart

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/proc"
)

// A component's scenario drives the real binary, running as its service
// account with only the chart's RBAC, through every API call its code makes.
type component struct {
	name string // service account holdfast-<name>
	cmd  string // ./cmd/<binary>
	// scenario starts the binary (args from the chart's own workload) and
	// makes it use the API; it returns when the binary has stopped.
	scenario func(t *testing.T, bin string, kubeconfig string, chartArgs []string)
	// unexercised names grants (as Grant.String prints them) the code uses
	// only on a path the scenario cannot drive deterministically, each with
	// the reason; every other grant must be used.
	unexercised map[string]string
	// sa is the service account when it is not holdfast-<name> (a second
	// role of one binary).
	sa string
	// workload is the component whose workload's args the scenario gets,
	// when not name (a second mode of one binary).
	workload string
	// values is a file under charts/holdfast/ci the role is rendered with;
	// its RBAC is applied for the scenario, and only the grants it adds to
	// the defaults' are judged "used" (the defaults' are the other role's).
	values string
}

func (c component) serviceAccount() string {
	if c.sa != "" {
		return c.sa
	}
	return "holdfast-" + c.name
}

// installedVWC is the configuration helm installed for the RBAC test, and
// renderedDefaults what it rendered.
var (
	installedVWC     admissionregistrationv1.ValidatingWebhookConfiguration
	renderedDefaults []Manifest
)

// components lists every component the chart grants RBAC to. Each has a
// scenario as soon as its binary is in the tree.
var components = []component{
	{name: "webhook", cmd: "./cmd/holdfast-webhook", scenario: webhookScenario},
	{name: "controller", cmd: "./cmd/holdfast-controller", scenario: controllerScenario, unexercised: map[string]string{
		// Checked by the apiserver itself (no request of the controller's in
		// the audit log): the scenario's issued certificate and republished
		// bundle are writes it refuses without them.
		"sign signers.certificates.k8s.io/holdfast.io/lease (ClusterRole/holdfast-controller)":   "the apiserver checks it on the controller's update of a PodCertificateRequest's status (the scenario's runtime certificate)",
		"attest signers.certificates.k8s.io/holdfast.io/lease (ClusterRole/holdfast-controller)": "the apiserver's ClusterTrustBundle attest admission checks it on the controller's create and update of holdfast.io:lease:ca (both in the scenario)",
	}},
	{name: "scheduler", cmd: "./cmd/holdfast-scheduler", scenario: schedulerScenario, unexercised: map[string]string{
		"get units.holdfast.io (ClusterRole/holdfast-scheduler)": "UnitPlacement's Bind reads the apiserver's copy only when its cached copy conflicts or refuses (scheduler-plugin/unitplacement: Bind)",
	}},
	{name: "node", cmd: "./cmd/holdfast-node", scenario: nodeScenario},
	{name: "node-voters", sa: "holdfast-node", workload: "node", values: "voters-values.yaml", cmd: "./cmd/holdfast-node", scenario: nodeScenario},
	{name: "node-staticpod", sa: "holdfast-node", workload: "node", values: "staticpod-values.yaml", cmd: "./cmd/holdfast-node", scenario: nodeStaticPodScenario},
	{name: "controller-voters", sa: "holdfast-controller-voters", values: "voters-values.yaml", cmd: "./cmd/holdfast-controller", scenario: votersScenario,
		unexercised: votersUnexercised},
}

// Each component's chart RBAC is exactly what its code uses: the apiserver's
// audit log of the real binary, run as the chart's service account with only
// the chart's roles, shows no request refused (the chart grants enough) and
// every granted verb, resource and name used (the chart grants no more).
func TestRBACGrantsEachComponentOnlyWhatItUses(t *testing.T) {
	ctx := context.Background()
	root, ch, ms := renderDefaults(t)
	installedVWC, renderedDefaults = installForComponents(t), ms

	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			sa := c.serviceAccount()
			cms := ms
			if c.values != "" {
				cms = renderCI(t, ch, c.values)
			}
			b, err := Grants(cms, Namespace, sa)
			if err != nil {
				t.Fatal(err)
			}
			// Secrets (issue 9): only get, and only by name.
			for _, g := range b.Grants {
				if g.Resource == "secrets" && (g.Name == "" || g.Verb != "get") {
					t.Errorf("%s may %s Secrets beyond one named Secret: %s", sa, g.Verb, g)
				}
			}
			if len(b.Wildcards) > 0 {
				t.Errorf("wildcard rules are never least privilege:\n  %s", strings.Join(b.Wildcards, "\n  "))
			}
			if len(b.Grants) == 0 {
				t.Fatalf("the chart grants holdfast-%s nothing", c.name)
			}
			if _, err := os.Stat(filepath.Join(root, c.cmd)); err != nil {
				// Not landed yet: its roles follow its branch's code and are
				// judged by its scenario once the binary is in the tree.
				t.Logf("%s is not in the tree yet; its %d grants are not judged", c.cmd, len(b.Grants))
				return
			}
			if c.scenario == nil {
				t.Fatalf("%s is in the tree but has no RBAC scenario: write one in test/chart", c.cmd)
			}
			bin := buildBinary(t, root, c.cmd)
			if c.values != "" {
				b = addedGrants(t, ms, b, sa)
				applyRBAC(t, ms, cms)
			}
			kubeconfig := serviceAccountKubeconfig(ctx, t, sa)
			before, err := Requests(auditLog, saUser(sa))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if t.Failed() {
					if all, err := Requests(auditLog, saUser(sa)); err == nil && len(all) >= len(before) {
						t.Logf("requests of %s:\n%s", saUser(sa), Describe(all[len(before):]))
					}
				}
			})
			workload := c.name
			if c.workload != "" {
				workload = c.workload
			}
			c.scenario(t, bin, kubeconfig, containerArgs(t, cms, workload))
			all, err := Requests(auditLog, saUser(sa))
			if err != nil {
				t.Fatal(err)
			}
			reqs := all[len(before):]
			if len(reqs) == 0 {
				t.Fatalf("the audit log shows no request of %s", saUser(sa))
			}
			denied, unused := Judge(b, reqs)
			unused = slices.DeleteFunc(unused, func(g Grant) bool {
				if why, ok := c.unexercised[g.String()]; ok {
					t.Logf("not exercised here: %s: %s", g, why)
					return true
				}
				return false
			})
			if len(denied) > 0 {
				t.Errorf("the chart does not grant %s what its code uses; refused:\n%s", sa, Describe(denied))
			}
			if len(unused) > 0 {
				t.Errorf("the chart grants %s (%s) more than its code uses; never used:\n%s\nit made:\n%s", sa, c.name, Describe(unused), Describe(reqs))
			}
			t.Logf("%s (%s): %d requests, %d grants all used; bootstrap roles bound: %v", sa, c.name, len(reqs), len(b.Grants), b.Foreign)
		})
	}
}

// renderDefaults loads the repository's chart and renders it with its
// default values.
func renderDefaults(t *testing.T) (root string, ch *chart.Chart, ms []Manifest) {
	t.Helper()
	root = repoRoot(t)
	ch, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if ms, _, err = Render(ch, map[string]any{}); err != nil {
		t.Fatal(err)
	}
	return root, ch, ms
}

// installForComponents helm-installs the chart (uninstalled at the end of
// the test) and takes out the webhook configuration it installed, which no
// webhook pod answers here; a test serves a copy from the real binary.
func installForComponents(t *testing.T) admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	ctx := context.Background()
	installChart(t)
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "holdfast-webhook"}, &vwc); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, vwc.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	return vwc
}

// installChart helm-installs the chart with its defaults, uninstalled at
// the end of the test.
func installChart(t *testing.T) (*chart.Chart, *action.Configuration) {
	t.Helper()
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t)
	inst := newInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace, inst.Timeout = "holdfast", Namespace, true, time.Minute
	if _, err := inst.Run(ch, map[string]any{}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Cleanup(func() {
		if _, err := newUninstall(cfg).Run("holdfast"); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	return ch, cfg
}

func saUser(sa string) string {
	return "system:serviceaccount:" + Namespace + ":" + sa
}

var built sync.Map // package -> binary path, once per test process

// buildBinary builds pkg into bin/test-chart/ (gitignored): go build leaves
// a binary that is already up to date alone, so a test run links each
// binary at most once, and a warm rerun links none.
func buildBinary(t *testing.T, root, pkg string) string {
	t.Helper()
	if bin, ok := built.Load(pkg); ok {
		return bin.(string)
	}
	bin := filepath.Join(root, "bin", "test-chart", filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	built.Store(pkg, bin)
	return bin
}

// serviceAccountKubeconfig is a kubeconfig with a token of the chart's
// service account, as its pod would mount.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, sa string) string {
	t.Helper()
	return podKubeconfig(ctx, t, sa, nil)
}

// podKubeconfig is the same with a token bound to pod (nil: unbound), as
// the kubelet projects it: the apiserver adds the pod's node to the user.
func podKubeconfig(ctx context.Context, t *testing.T, sa string, pod *corev1.Pod) string {
	t.Helper()
	return tokenKubeconfig(ctx, t, Namespace, sa, pod)
}

// tokenKubeconfig is a kubeconfig with a token of the service account ns/sa,
// bound to pod when not nil.
func tokenKubeconfig(ctx context.Context, t *testing.T, ns, sa string, pod *corev1.Pod) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}
	if pod != nil {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for %s: %v", sa, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// override replaces (or adds) --flag=value arguments.
func override(args []string, flags map[string]string) []string {
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, ok := flags[name]; !ok {
			out = append(out, a)
		}
	}
	for k, v := range flags {
		out = append(out, "--"+k+"="+v)
	}
	return out
}

// process is a running binary.
type process struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan struct{} // closed once the binary has ended
}

func startProcess(t *testing.T, bin, kubeconfig string, args []string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", filepath.Base(bin), p.stderr.String())
		}
	})
	return p
}

func (p *process) stop(t *testing.T) {
	if !proc.Stop(p.cmd.Process, p.exited, 30*time.Second) {
		t.Errorf("%s did not stop on SIGTERM", p.cmd.Path)
	}
}

// serveChartWebhook starts the real holdfast-webhook with the chart's args
// and installs the chart's configuration pointed at it; it returns once the
// webhook answers TLS.
func serveChartWebhook(t *testing.T, installed admissionregistrationv1.ValidatingWebhookConfiguration, bin, kubeconfig string, chartArgs []string) *process {
	t.Helper()
	ctx := context.Background()
	wh := env.Webhooks
	p := startProcess(t, bin, kubeconfig, override(chartArgs, map[string]string{
		"host": wh.LocalServingHost, "port": fmt.Sprint(wh.LocalServingPort), "cert-dir": wh.LocalServingCertDir,
		"health-probe-bind-address": "127.0.0.1:0", "metrics-bind-address": "0",
	}))

	// The chart's configuration, pointed at the local binary.
	vwc := installed.DeepCopy()
	vwc.ResourceVersion, vwc.UID = "", ""
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		url := fmt.Sprintf("https://%s:%d%s", wh.LocalServingHost, wh.LocalServingPort, *cc.Service.Path)
		cc.Service, cc.URL, cc.CABundle = nil, &url, wh.LocalServingCAData
	}
	if err := env.Client.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, vwc) })
	addr := net.JoinHostPort(wh.LocalServingHost, fmt.Sprint(wh.LocalServingPort))
	eventually(t, "the webhook serving on "+addr, func() bool {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // only: is it up
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return p
}

// webhookScenario serves the chart's configuration from the real binary and
// sends it one request of each kind whose rule reads the cluster.
func webhookScenario(t *testing.T, bin, kubeconfig string, chartArgs []string) {
	ctx := context.Background()
	p := serveChartWebhook(t, installedVWC, bin, kubeconfig, chartArgs)

	ns := env.Namespace(t)
	mkNode := func(name string, labels map[string]string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		// Until the binary serves, the apiserver cannot call it.
		if err := pastWebhookCalls(func() error { return env.Client.Create(ctx, n) }); err != nil {
			t.Fatalf("creating node %s: %v", name, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, n) })
		return n
	}
	// A holdfast label on a Node: swaps in progress are read (N3).
	mkNode("rb-edge-1", map[string]string{holdfastv1.LabelVoterEligible: "true", "holdfast.io/device": "kiln-1"})
	cp := mkNode("rb-cp-1", map[string]string{holdfastv1.LabelEtcdRole: "true"})
	mkNode("rb-standby-1", nil)

	// Removing the etcd role label: VoterPolicy default is read (N2).
	patchNode := func(n *corev1.Node, patch string) error {
		return env.Client.Patch(ctx, n, client.RawPatch("application/merge-patch+json", []byte(patch)))
	}
	if err := patchNode(cp, `{"metadata":{"labels":{"node-role.kubernetes.io/etcd":null}}}`); err != nil {
		t.Logf("etcd label removal: %v", err)
	}
	// The out-of-service taint: the swap Lease is read (N5).
	if err := patchNode(cp, `{"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","effect":"NoExecute"}]}}`); err != nil {
		t.Logf("out-of-service taint: %v", err)
	}
	// A Unit with targets: the Nodes are listed (targets, primaries).
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln-1"},
		Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"},
			NodeSelector: map[string]string{"holdfast.io/device": "kiln-1"},
			Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, Targets: &holdfastv1.FailoverTargets{Nodes: []string{"rb-standby-1"}}}},
	}
	// Refusals are the webhook's business; a rule that could not read what
	// it needs shows in the audit log as a 403 and fails the judgement.
	if err := env.Client.Create(ctx, u); err != nil {
		t.Logf("creating a Unit: %v", err)
	}
	// A manual VoterSwap: swaps, Nodes and the policy are read (V1, V2).
	sw := &holdfastv1.VoterSwap{ObjectMeta: metav1.ObjectMeta{Name: "rb-swap"}, Spec: holdfastv1.VoterSwapSpec{Outgoing: "rb-cp-1", Incoming: "rb-edge-1"}}
	if err := env.Client.Create(ctx, sw); err == nil {
		t.Cleanup(func() { _ = env.Client.Delete(ctx, sw) })
	} else {
		t.Logf("creating a VoterSwap: %v", err)
	}
	// A runtime pod bound by someone else: the pod is read (P5).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln-1-runtime-e1", Labels: map[string]string{holdfastv1.LabelUnit: "kiln-1", holdfastv1.LabelEpoch: "1"}},
		Spec: corev1.PodSpec{SchedulerName: holdfastv1.SchedulerName, Containers: []corev1.Container{{Name: "runtime", Image: "x",
			Ports: []corev1.ContainerPort{{ContainerPort: 9443}}, ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9443)}}}}}},
	}
	// A warm standby pod: its Unit and its standby Node are read (P7).
	warm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: holdfastv1.WarmPodName("kiln-1", "rb-standby-1"),
			Labels: map[string]string{holdfastv1.LabelUnit: "kiln-1", holdfastv1.LabelWarmStandby: "rb-standby-1"}},
		Spec: corev1.PodSpec{SchedulerName: holdfastv1.SchedulerName, Containers: []corev1.Container{{Name: "runtime", Image: "x"}}},
	}
	if err := env.Client.Create(ctx, warm); err == nil {
		t.Cleanup(func() { _ = env.Client.Delete(ctx, warm) })
	} else {
		t.Logf("creating a warm standby pod: %v", err)
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("creating a runtime pod through the webhook: %v", err) // no rule of it reads the cluster
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	err = cs.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "rb-standby-1"}}, metav1.CreateOptions{})
	if err == nil {
		t.Errorf("binding a runtime pod as an admin was allowed; want the webhook's refusal")
	}
	p.stop(t)
}
