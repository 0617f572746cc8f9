//go:build integration

package chart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/test/crihost"
	"github.com/holdfast-io/holdfast/test/dbusdouble"
	"github.com/holdfast-io/holdfast/test/etcdtls"
	"github.com/holdfast-io/holdfast/test/poll"
	"github.com/holdfast-io/holdfast/test/ports"
)

// nodeScenario runs holdfast-node in the mode its chart args name
// (--voter-swaps), with only the capabilities the chart's container adds in
// that mode (every other one dropped, though it runs as uid 0 as in the
// chart), CRI on a real containerd and, with voter swaps, systemd on the
// D-Bus double, and makes each of its parts use the API: the reporter
// patches its Node, the fence agent stops a stale-epoch runtime and posts
// an Event; with voter swaps, the role reconciler reads the swap Lease for a
// role step and the swaps for a finish-demote.
func nodeScenario(t *testing.T, bin, kubeconfig string, chartArgs []string) {
	nodeScenarioOn(t, bin, kubeconfig, chartArgs, false)
}

// nodeStaticPodScenario is nodeScenario with VoterPolicy default choosing
// the StaticPod actuator on a provisioned kubeadm host laid out under a
// temporary directory (the chart's etcd client files moved there too): the
// reporter also reads the node's etcd mirror pod from the apiserver.
func nodeStaticPodScenario(t *testing.T, bin, kubeconfig string, chartArgs []string) {
	nodeScenarioOn(t, bin, kubeconfig, chartArgs, true)
}

func nodeScenarioOn(t *testing.T, bin, kubeconfig string, chartArgs []string, staticPod bool) {
	ctx := context.Background()
	voters := slices.Contains(chartArgs, "--voter-swaps=true")
	if !voters && !slices.Contains(chartArgs, "--voter-swaps=false") {
		t.Fatalf("the chart's args %v name no --voter-swaps mode", chartArgs)
	}
	if staticPod && (!voters || slices.ContainsFunc(chartArgs, func(a string) bool { return strings.HasPrefix(a, "--systemd-dir=") })) {
		t.Fatalf("the chart's args %v are not the StaticPod actuator's (voter swaps on, no --systemd-dir)", chartArgs)
	}
	mode := "off"
	switch {
	case staticPod:
		mode = "staticpod"
	case voters:
		mode = "on"
	}
	dir := t.TempDir()
	host, err := crihost.Start(filepath.Join(dir, "cri"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	const image = "holdfast.test/runtime:1"
	tar := filepath.Join(dir, "rt.tar")
	if err := crihost.BuildTestImage(tar, image, []string{"lease"}); err != nil {
		t.Fatal(err)
	}
	if err := host.Import(tar); err != nil {
		t.Fatal(err)
	}
	rt, err := host.RuntimeService(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bus, err := dbusdouble.StartBus(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	m, err := dbusdouble.Serve(bus, dbusdouble.Config{DropInDir: filepath.Join(dir, "systemd"), Units: []dbusdouble.Unit{
		{Name: "k3s.service"}, {Name: "k3s-agent.service", Enabled: true, Active: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)

	nodeName := "rb-node-voters-" + mode
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, node) })

	// A Failover unit bound here at epoch 1, its runtime running in containerd.
	ns := env.Namespace(t)
	p, err := ports.Loopback(2)
	if err != nil {
		t.Fatal(err)
	}
	leasePort := int32(p[0])
	u := &holdfastv1.Unit{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kiln-1"},
		Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: image, LeasePort: leasePort},
			NodeSelector: map[string]string{"holdfast.io/device": "kiln-1"},
			Availability: holdfastv1.Availability{Mode: holdfastv1.Failover, LeaseDurationSeconds: 10, RuntimeStartupGraceSeconds: 120,
				Targets: &holdfastv1.FailoverTargets{Nodes: []string{"rb-standby"}}}}}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	bind := func(epoch int64) {
		u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Node: nodeName, Epoch: epoch, Pod: fmt.Sprintf("kiln-1-runtime-e%d", epoch)}
		if err := env.Client.Status().Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	bind(1)
	sandbox, _, err := crihost.RunPod(ctx, rt, filepath.Join(dir, "logs"), crihost.Pod{
		Namespace: ns, Name: "kiln-1-runtime-e1", UID: "kiln-1-runtime-e1-uid", Image: image,
		Args:   []string{"--listen", fmt.Sprintf("127.0.0.1:%d", leasePort), "--unit", ns + "/kiln-1", "--epoch", "1", "--mode", "Failover"},
		Labels: map[string]string{holdfastv1.LabelUnit: "kiln-1", holdfastv1.LabelEpoch: "1"}})
	if err != nil {
		t.Fatal(err)
	}

	// As in a cluster: the real webhook with the chart's configuration in
	// front, and the plugin's token bound to its DaemonSet pod on this node,
	// so its writes on its own Node pass the own-node rule.
	dsPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "holdfast-node-rb-voters-" + mode},
		Spec: corev1.PodSpec{ServiceAccountName: "holdfast-node", NodeName: nodeName,
			Containers: []corev1.Container{{Name: "node", Image: "holdfast.local/holdfast-node:dev"}}},
	}
	if err := env.Client.Create(ctx, dsPod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, dsPod) })
	kubeconfig = podKubeconfig(ctx, t, "holdfast-node", dsPod)
	webhook := serveChartWebhook(t, installedVWC, buildBinary(t, repoRoot(t), "./cmd/holdfast-webhook"),
		serviceAccountKubeconfig(ctx, t, "holdfast-webhook"), containerArgs(t, renderedDefaults, "webhook"))

	flags := map[string]string{"node-name": nodeName, "host-dir": filepath.Join(dir, "holdfast"), "cri-endpoint": host.Endpoint,
		"metrics-bind-address": "0", "health-probe-bind-address": "127.0.0.1:0"}
	switch {
	case staticPod:
		flags["member-data-dir"] = filepath.Join(dir, "etcd")
		flags["etcd-local-endpoint"] = fmt.Sprintf("https://127.0.0.1:%d", p[1])
		for flag, file := range provisionStaticPodHost(ctx, t, dir, fmt.Sprintf("https://127.0.0.1:%d", p[1])) {
			flags[flag] = file
		}
	case voters:
		flags["systemd-dir"], flags["member-data-dir"] = filepath.Join(dir, "systemd"), filepath.Join(dir, "db")
		flags["systemd-bus-address"] = bus.Address
		flags["etcd-local-endpoint"] = fmt.Sprintf("http://127.0.0.1:%d", p[1])
	}
	proc := startProcess(t, setpriv(t), kubeconfig, append(chartCapabilities(t, voters), append([]string{"--", bin}, override(chartArgs, flags)...)...))
	getNode := func() *corev1.Node {
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nodeName}, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, "the reporter's annotations on the Node", func() bool {
		n := getNode()
		return n.Annotations[holdfastv1.AnnotationProvisioned] == fmt.Sprint(voters) && (!voters || n.Annotations[holdfastv1.AnnotationFitness] != "")
	})

	// A re-bind: the runtime at epoch 1 is stale and is fenced, with an Event.
	bind(2)
	eventually(t, "the stale runtime fenced", func() bool {
		sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: sandbox})
		return err == nil && len(sbs) == 0
	})
	eventually(t, "the fence Event", func() bool {
		var evs corev1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Source.Component == "holdfast-node" {
				return true
			}
		}
		return false
	})
	eventually(t, "the fence audit line", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "holdfast", "fence", "fence-audit.jsonl"))
		return err == nil && strings.Contains(string(b), `"reason":"StaleRuntimeStopped"`)
	})
	if !voters {
		proc.stop(t)
		return
	}

	// A role step without the swap Lease: read, refused, reported. Only the
	// voter controller may set a desired role through the webhook; this
	// one is written with it out of the way.
	webhook.stop(t)
	if err := env.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: installedVWC.Name}}); err != nil {
		t.Fatal(err)
	}
	// The apiserver may still call the stopped webhook from its cached
	// configuration for a moment.
	if err := pastWebhookCalls(func() error {
		n := getNode()
		n.Labels = map[string]string{holdfastv1.LabelDesiredRole: holdfastv1.RoleServer}
		n.Annotations[holdfastv1.AnnotationRoleSwap] = "20261129T200000Z-rb-cp-rb-node-1"
		n.Annotations[holdfastv1.AnnotationRoleStep] = holdfastv1.RoleStepPromote
		n.Annotations[holdfastv1.AnnotationRoleJoin] = "rb-node-1=https://127.0.0.1:2380"
		return env.Client.Update(ctx, n)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the actuator's refusal on the Node", func() bool {
		return strings.Contains(getNode().Annotations[holdfastv1.AnnotationActuator], holdfastv1.ActuatorRefused)
	})
	// A finish-demote without the Lease: the plugin reads the swaps for a
	// record of its member's removal, finds none, and refuses.
	if err := pastWebhookCalls(func() error {
		n := getNode()
		n.Labels[holdfastv1.LabelDesiredRole] = holdfastv1.RoleAgent
		n.Annotations[holdfastv1.AnnotationRoleStep] = holdfastv1.RoleStepFinishDemote
		delete(n.Annotations, holdfastv1.AnnotationRoleJoin)
		return env.Client.Update(ctx, n)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the finish-demote refusal on the Node", func() bool {
		a := getNode().Annotations[holdfastv1.AnnotationActuator]
		return strings.Contains(a, holdfastv1.RoleStepFinishDemote) && strings.Contains(a, "not provably gone")
	})
	proc.stop(t)
}

// provisionStaticPodHost lays out a kubeadm host under dir (the manifests
// directory, the etcd CA with its key and a client certificate under
// pki/etcd, the operator's apiserver template, a kubelet kubeconfig whose
// server is the control-plane endpoint) and creates VoterPolicy default
// choosing the StaticPod actuator there; it returns the plugin's etcd
// client flags for the files under pki/etcd and its kubelet kubeconfig
// flag.
func provisionStaticPodHost(ctx context.Context, t *testing.T, dir, endpoint string) map[string]string {
	t.Helper()
	pki := etcdtls.New(t)
	etcdDir := filepath.Join(dir, "pki", "etcd")
	files := map[string][]byte{
		filepath.Join(etcdDir, "ca.crt"): pki.CA, filepath.Join(etcdDir, "ca.key"): pki.CAKey,
		filepath.Join(etcdDir, "healthcheck-client.crt"): pki.ClientCert, filepath.Join(etcdDir, "healthcheck-client.key"): pki.ClientKey,
		filepath.Join(dir, "kubernetes-holdfast", "kube-apiserver.yaml"): []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, namespace: kube-system}\n" +
			"spec: {containers: [{name: kube-apiserver, image: registry.k8s.io/kube-apiserver:v1.37.2}]}\n"),
		filepath.Join(dir, "kubelet.conf"): []byte("apiVersion: v1\nkind: Config\nclusters: [{name: kubernetes, cluster: {server: \"https://cp.kubeadm.test:6443\"}}]\n" +
			"contexts: [{name: kubelet, context: {cluster: kubernetes, user: kubelet}}]\ncurrent-context: kubelet\nusers: [{name: kubelet, user: {}}]\n"),
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	policy := &holdfastv1.VoterPolicy{ObjectMeta: metav1.ObjectMeta{Name: holdfastv1.VoterPolicyName},
		Spec: holdfastv1.VoterPolicySpec{TargetVoters: 3, Etcd: holdfastv1.EtcdAccess{Endpoints: []string{endpoint}},
			Host: holdfastv1.HostRoleSettings{Actuator: holdfastv1.ActuatorStaticPod, MemberDataDir: filepath.Join(dir, "etcd"),
				StaticPod: &holdfastv1.StaticPodSettings{EtcdImage: "registry.k8s.io/etcd:3.6.5-0", ManifestsDir: filepath.Join(dir, "manifests"),
					PKIDir: filepath.Join(dir, "pki"), APIServerTemplate: filepath.Join(dir, "kubernetes-holdfast", "kube-apiserver.yaml")}}}}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, policy) })
	return map[string]string{"etcd-ca": filepath.Join(etcdDir, "ca.crt"),
		"etcd-cert": filepath.Join(etcdDir, "healthcheck-client.crt"), "etcd-key": filepath.Join(etcdDir, "healthcheck-client.key"),
		"kubelet-kubeconfig": filepath.Join(dir, "kubelet.conf")}
}

// pastWebhookCalls runs write until the apiserver stops failing to call a
// webhook: it calls the webhooks of the configurations it has cached, which
// trail a webhook that starts, stops or has its configuration deleted. Any
// other outcome is returned.
func pastWebhookCalls(write func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := write()
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "failed calling webhook") {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 60*time.Second, what, poll.True(cond))
}

// setpriv is util-linux's setpriv, which runs the plugin with the chart's
// capabilities.
func setpriv(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) runs holdfast-node with only the chart's capabilities: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the node scenario runs holdfast-node as uid 0, as the chart does; euid %d", os.Geteuid())
	}
	return p
}

// chartCapabilities are setpriv's flags for the capabilities the chart's
// holdfast-node container keeps in a mode: uid 0 gets exactly its bounding
// set across exec when its inheritable set is empty.
func chartCapabilities(t *testing.T, voters bool) []string {
	t.Helper()
	ch, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := Render(ch, map[string]any{"controller": map[string]any{"voters": map[string]any{"enabled": voters}}})
	if err != nil {
		t.Fatal(err)
	}
	sc := nodePodSpec(t, ms).Containers[0].SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("the chart's holdfast-node securityContext %+v drops not ALL", sc)
	}
	set := "-all"
	for _, c := range sc.Capabilities.Add {
		set += ",+" + strings.ToLower(string(c))
	}
	return []string{"--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=" + set, "--no-new-privs"}
}
