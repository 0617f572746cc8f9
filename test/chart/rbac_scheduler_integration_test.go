//go:build integration

package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/controller/units"
	"github.com/holdfast-io/holdfast/test/ports"
)

// schedulerScenario runs holdfast-scheduler with the chart's rendered
// configuration (the ConfigMap it mounts) and args: it wins its election
// Lease in the release namespace, places a unit's first runtime pod on the
// primary and records the node in the unit's binding (at Bind).
func schedulerScenario(t *testing.T, bin, kubeconfig string, chartArgs []string) {
	ctx := context.Background()
	ns := env.Namespace(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"rs-primary", "rs-standby"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}}
		if n == "rs-primary" {
			node.Labels["holdfast.io/device"] = "rs-boiler"
		}
		if err := env.Client.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, node) })
		q := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
		node.Status = corev1.NodeStatus{Capacity: q, Allocatable: q, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady,
			Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		if err := env.Client.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
		// The apiserver taints a new Node not-ready; its kubelet's Ready
		// report would have the node lifecycle controller lift it.
		node.Spec.Taints = nil
		if err := env.Client.Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rs-boiler"},
		Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"},
			NodeSelector: map[string]string{"holdfast.io/device": "rs-boiler"},
			Availability: holdfastv1.Availability{Targets: &holdfastv1.FailoverTargets{Nodes: []string{"rs-standby"}}}},
	}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	// The controller's part: authorise epoch 1, no node yet.
	u.Status.RuntimeBinding = &holdfastv1.RuntimeBinding{Epoch: 1, Origin: holdfastv1.OriginInitial, Pod: units.PodName(u.Name, 1)}
	if err := env.Client.Status().Update(ctx, u); err != nil {
		t.Fatal(err)
	}

	cfg := filepath.Join(t.TempDir(), "scheduler-config.yaml")
	// The chart's configuration names no kubeconfig (in a pod: the mounted
	// token); here the same service account's token comes from a file.
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(chartSchedulerConfig(t)), &doc); err != nil {
		t.Fatal(err)
	}
	doc["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	proc := startProcess(t, bin, kubeconfig, override(chartArgs, map[string]string{
		"config": cfg, "bind-address": "127.0.0.1", "secure-port": fmt.Sprint(ports.Free(t, 1)[0]), "cert-dir": t.TempDir(),
		"authentication-kubeconfig": kubeconfig, "authorization-kubeconfig": kubeconfig,
	}))

	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-proc.exited:
			return false, fmt.Errorf("holdfast-scheduler exited")
		default:
		}
		l, err := cs.CoordinationV1().Leases(Namespace).Get(ctx, "holdfast-scheduler", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Fatalf("holdfast-scheduler never took its election Lease %s/holdfast-scheduler: %v", Namespace, err)
	}
	t.Cleanup(func() {
		_ = cs.CoordinationV1().Leases(Namespace).Delete(ctx, "holdfast-scheduler", metav1.DeleteOptions{})
	})

	pod := units.RuntimePod(u, 1, units.Placement{PrimarySelector: true})
	pod.Namespace = ns
	pod.Spec.AutomountServiceAccountToken = new(false)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(0))
	if pod.Spec.SchedulerName != "holdfast-scheduler" {
		t.Fatalf("the controller's runtime pod names scheduler %q, want holdfast-scheduler", pod.Spec.SchedulerName)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	})
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var got holdfastv1.Unit
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), &got); err != nil {
			return false, err
		}
		b := got.Status.RuntimeBinding
		return b != nil && b.Node == "rs-primary" && b.Pod == pod.Name, nil
	})
	if err != nil {
		p, _ := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		t.Fatalf("the scheduler never recorded rs-primary in the binding of %s: %v; pod conditions %+v", u.Name, err, p.Status.Conditions)
	}
	// Bind records the binding before it posts the Binding: wait for
	// the pod to be bound.
	var p *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", err
	})
	if err != nil {
		t.Fatalf("runtime pod %s never bound: %v", pod.Name, err)
	}
	if p.Spec.NodeName != "rs-primary" {
		t.Fatalf("runtime pod bound to %q, want rs-primary", p.Spec.NodeName)
	}
	// Its watches reach the audit log when they end.
	proc.stop(t)
}

// chartSchedulerConfig is the scheduler configuration the chart renders
// into the ConfigMap its Deployment mounts.
func chartSchedulerConfig(t *testing.T) string {
	t.Helper()
	for _, m := range renderedDefaults {
		if m.Kind == "ConfigMap" && m.Name == "holdfast-scheduler-config" {
			data, _ := m.Object["data"].(map[string]any)
			if s, ok := data["scheduler-config.yaml"].(string); ok {
				return s
			}
		}
	}
	t.Fatal("the chart renders no holdfast-scheduler-config ConfigMap")
	return ""
}
