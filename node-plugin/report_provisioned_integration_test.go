//go:build integration

package nodeplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/node-plugin/actuator"
	"github.com/holdfast-io/holdfast/node-plugin/report"
)

// TestReporterSaysWhyTheHostIsNotProvisioned: a kubeadm voter whose kubelet
// reaches only its own kube-apiserver is reported not provisioned, and the
// reason, which the annotation cannot carry, is a Warning Event on its Node
// (reason NotProvisioned, what kubectl describe node shows and the voter
// gates point at), posted once per reason: not again on the next pass nor
// by a restarted reporter, again when the reason changes, none once the
// host is fixed, and again when a reason returns while its Event lasts.
func TestReporterSaysWhyTheHostIsNotProvisioned(t *testing.T) {
	ctx := context.Background()
	const node = "rep-sp1"
	cfg := newStaticPodHost(t, node)
	writeHostFile(t, cfg.KubeletKubeconfig, kubeletKubeconfig("https://127.0.0.1:6443"))
	// The host runs a member: the kubelet's etcd mirror pod is Running.
	writeHostFile(t, filepath.Join(cfg.ManifestsDir, actuator.EtcdManifest), []byte("apiVersion: v1\nkind: Pod\n"+
		"metadata: {name: etcd, namespace: kube-system, annotations: {}}\nspec: {containers: [{name: etcd, image: registry.k8s.io/etcd:3.6.5-0}]}\n"))
	publishMirrorPod(t, cfg, actuator.EtcdManifest)
	createNode(t, node)
	act := actuator.NewStaticPod(actuator.APIMirrorPods{Reader: env.Client}, cfg)
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	newReporter := func() *report.Reporter {
		return &report.Reporter{Client: env.Client, NodeName: node, Units: act, State: cfg.State, Clock: clk, NoFitness: true}
	}
	pass := func(rep *report.Reporter, wantProvisioned string) {
		t.Helper()
		if err := rep.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			t.Fatal(err)
		}
		if got := n.Annotations[holdfastv1.AnnotationProvisioned]; got != wantProvisioned || n.Labels[holdfastv1.LabelRole] != holdfastv1.RoleServer {
			t.Fatalf("provisioned %q role %q, want %q and server", got, n.Labels[holdfastv1.LabelRole], wantProvisioned)
		}
	}
	events := func() []corev1.Event {
		t.Helper()
		var list corev1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			t.Fatal(err)
		}
		var out []corev1.Event
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node {
				out = append(out, e)
			}
		}
		return out
	}
	wantEvents := func(when string, says ...string) {
		t.Helper()
		evs := events()
		if len(evs) != len(says) {
			t.Fatalf("%s: %d Events on Node %s, want %d: %+v", when, len(evs), node, len(says), evs)
		}
		for _, s := range says {
			found := false
			for _, e := range evs {
				if e.Type == corev1.EventTypeWarning && e.Reason == holdfastv1.EventReasonNotProvisioned && strings.Contains(e.Message, s) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no Warning NotProvisioned Event saying %q: %+v", when, s, evs)
			}
		}
	}

	rep := newReporter()
	pass(rep, "false")
	stranded := "kubelet.conf points at https://127.0.0.1:6443, this node's own kube-apiserver (a loopback address)"
	wantEvents("the first pass", stranded)
	if e := events()[0]; !strings.Contains(e.Message, "point its server: at the control-plane endpoint") {
		t.Errorf("the Event does not say the remedy: %q", e.Message)
	}
	pass(rep, "false")
	wantEvents("the same reason again", stranded)
	pass(newReporter(), "false")
	wantEvents("a restarted reporter, the same reason", stranded)

	if err := os.Remove(cfg.KubeletKubeconfig); err != nil {
		t.Fatal(err)
	}
	pass(rep, "false")
	missing := "kubelet.conf does not exist"
	wantEvents("another reason", stranded, missing)

	writeHostFile(t, cfg.KubeletKubeconfig, kubeletKubeconfig("https://cp.kubeadm.test:6443"))
	pass(rep, "true")
	wantEvents("the host fixed", stranded, missing)

	// The reason returns while its first Event still lasts: said again,
	// at the time it returned.
	clk.Step(10 * time.Minute)
	writeHostFile(t, cfg.KubeletKubeconfig, kubeletKubeconfig("https://127.0.0.1:6443"))
	pass(rep, "false")
	wantEvents("the first reason returned", stranded, missing, stranded)
	returned := 0
	for _, e := range events() {
		if strings.Contains(e.Message, stranded) && e.LastTimestamp.Time.Equal(clk.Now()) {
			returned++
		}
	}
	if returned != 1 {
		t.Errorf("%d Events say the returned reason at %v, want 1: %+v", returned, clk.Now(), events())
	}
	pass(newReporter(), "false")
	wantEvents("a restarted reporter after the return", stranded, missing, stranded)
}
