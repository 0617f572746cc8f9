//go:build integration

package chart

import (
	"context"
	"encoding/base64"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leaseapi "github.com/holdfast-io/holdfast/api/lease"
	holdfastv1 "github.com/holdfast-io/holdfast/api/v1alpha1"
	"github.com/holdfast-io/holdfast/internal/leasetls"
	"github.com/holdfast-io/holdfast/internal/leasetls/leasetlstest"
)

// controllerScenario runs holdfast-controller --role=units (the chart's
// args) and takes an Autonomy unit through its first binding, a manual
// failover refused without a confirmed fence, and one carried out with it:
// runtime pods created and deleted, status written, the request consumed,
// Events posted, the election Lease held. The real webhook with the chart's
// configuration stands in front, and the confirmed failover is asked with
// the real kubectl-holdfast.
func controllerScenario(t *testing.T, bin, kubeconfig string, chartArgs []string) {
	ctx := context.Background()
	ns := env.Namespace(t)
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "rb-press-edge", Labels: map[string]string{"holdfast.io/device": "rb-press"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "rb-press-standby"}},
	} {
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, n) })
		// Ready, as its kubelet would report: the webhook takes only a
		// Ready failover target.
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
		if err := env.Client.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// The real webhook with the chart's configuration stands in front, as
	// in a cluster: the runtime pods, the requests and their consumption
	// pass its rules.
	webhook := serveChartWebhook(t, installedVWC, buildBinary(t, repoRoot(t), "./cmd/holdfast-webhook"),
		serviceAccountKubeconfig(ctx, t, "holdfast-webhook"), containerArgs(t, renderedDefaults, "webhook"))
	// The lease CA the chart generated, as its Secret mounts it.
	leaseCADir := t.TempDir()
	leaseCA := renderedSecret(t, renderedDefaults, "holdfast-lease-ca")
	leasetlstest.WriteAtomic(t, leaseCADir, leaseCA)
	proc := startProcess(t, bin, kubeconfig, override(chartArgs, map[string]string{
		"health-probe-bind-address": "127.0.0.1:0", "metrics-bind-address": "0",
		"audit-log-path": filepath.Join(t.TempDir(), "audit.log"), "identity": "rb-controller",
		"kubeconfig":   kubeconfig, // in a pod: the in-cluster service account
		"lease-ca-dir": leaseCADir,
	}))

	u := &holdfastv1.Unit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rb-press"},
		Spec: holdfastv1.UnitSpec{Runtime: holdfastv1.UnitRuntime{Image: "holdfast.local/unit-runtime:dev"},
			NodeSelector: map[string]string{"holdfast.io/device": "rb-press"},
			Availability: holdfastv1.Availability{Targets: &holdfastv1.FailoverTargets{Nodes: []string{"rb-press-standby"}}}},
	}
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	pod := func(epoch int64) (*corev1.Pod, bool) {
		p := &corev1.Pod{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("rb-press-runtime-e%d", epoch)}, p)
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return p, p.DeletionTimestamp == nil
	}
	epoch := func() int64 {
		cur := &holdfastv1.Unit{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
			t.Fatal(err)
		}
		if cur.Status.RuntimeBinding == nil {
			return 0
		}
		return cur.Status.RuntimeBinding.Epoch
	}
	var e1 int64
	eventually(t, "the first binding and its runtime pod", func() bool {
		e1 = epoch()
		_, ok := pod(e1)
		return e1 > 0 && ok
	})

	annotate := func(kv map[string]string) {
		// After the webhook is stopped, the apiserver may still call it
		// from its cached configuration for a moment.
		err := pastWebhookCalls(func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := &holdfastv1.Unit{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
					return err
				}
				if cur.Annotations == nil {
					cur.Annotations = map[string]string{}
				}
				for k, v := range kv {
					cur.Annotations[k] = v
				}
				return env.Client.Update(ctx, cur)
			})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	consumed := func() bool {
		cur := &holdfastv1.Unit{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
			t.Fatal(err)
		}
		_, pending := cur.Annotations[holdfastv1.AnnotationFailoverTo]
		return !pending
	}
	// Refused: an Autonomy runtime never fences itself.
	annotate(map[string]string{holdfastv1.AnnotationFailoverTo: "rb-press-standby"})
	eventually(t, "the refused request consumed", consumed)
	// Carried out with a confirmed fence, asked the way an operator asks:
	// kubectl holdfast failover --wait exits 0 once the real controller has
	// re-bound the unit.
	plugin := buildBinary(t, repoRoot(t), "./cmd/kubectl-holdfast")
	out, err := exec.Command(plugin, "--kubeconfig", env.Kubeconfig, "failover", "-n", ns, u.Name,
		"--to", "rb-press-standby", "--confirm-fenced", "powered off", "--wait", "--timeout", "1m").CombinedOutput()
	m := regexp.MustCompile(`re-bound at epoch (\d+)`).FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("kubectl holdfast failover --wait against the real controller: %v\n%s", err, out)
	}
	if e2, _ := strconv.ParseInt(m[1], 10, 64); e2 <= e1 {
		t.Fatalf("re-bound at epoch %d, not above the first binding's %d:\n%s", e2, e1, out)
	}
	e2, _ := strconv.ParseInt(m[1], 10, 64)
	eventually(t, "the re-bind, the old pod deleted", func() bool {
		_, newPod := pod(e2)
		_, oldPod := pod(e1)
		return epoch() == e2 && newPod && !oldPod && consumed()
	})
	status, err := exec.Command(plugin, "--kubeconfig", env.Kubeconfig, "status", "-n", ns).CombinedOutput()
	if err != nil || !strings.Contains(string(status), u.Name) {
		t.Errorf("kubectl holdfast status against the real controller: %v\n%s", err, status)
	}
	// The client-go events recorder patches an Event into a series when the
	// same decision is recorded again for the same Unit version: an invalid
	// restart request is refused on every pass while the Hold stands, and a
	// change to the runtime pod makes another pass.
	// The webhook refuses a restart that is not a time, so that request is
	// written with it out of the way.
	webhook.stop(t)
	if err := env.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: installedVWC.Name}}); err != nil {
		t.Fatal(err)
	}
	leaseCredentials(ctx, t, ns, e2, leaseCADir, leaseCA)
	annotate(map[string]string{holdfastv1.AnnotationRestart: "after lunch"})
	invalid := func() *eventsv1.Event {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i, e := range evs.Items {
			if e.Reason == "InvalidRequest" && e.Regarding.Name == u.Name {
				return &evs.Items[i]
			}
		}
		return nil
	}
	eventually(t, "the invalid restart request's Event", func() bool { return invalid() != nil })
	eventually(t, "the Event patched into a series", func() bool {
		p, _ := pod(e2)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"rb.holdfast.io/touch":"%d"}}}`, time.Now().UnixNano())
		if err := env.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
		e := invalid()
		return e.Series != nil && e.Series.Count >= 2
	})
	// A switch to Failover is a planned hand-over: the Autonomy runtime's
	// pod is deleted and read past the cache until it is gone, then the next
	// epoch.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &holdfastv1.Unit{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
			return err
		}
		cur.Spec.Availability.Mode = holdfastv1.Failover
		return env.Client.Update(ctx, cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hand-over to the next epoch once the Autonomy runtime's pod is gone", func() bool {
		// The pod of e2 is bound to a node: its deletion is graceful and
		// ends when the kubelet confirms the containers stopped, as the
		// test does here for the kubelet this cluster lacks.
		if p, running := pod(e2); p != nil && !running {
			if err := env.Client.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		e3 := epoch()
		_, next := pod(e3)
		old, _ := pod(e2)
		return e3 > e2 && next && old == nil
	})
	proc.stop(t)
}

// leaseCredentials drives the lease channel's certificates (docs/design.md
// §3 L12) as a cluster would: the runtime pod of the second binding, bound to its node,
// asks the lease signer for its certificate as its kubelet would, and is
// issued one naming its binding; the published CA bundle follows a second
// CA added to the lease CA's Secret.
func leaseCredentials(ctx context.Context, t *testing.T, ns string, epoch int64, dir string, files map[string][]byte) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("rb-press-runtime-e%d", epoch)}, pod); err != nil {
		t.Fatal(err)
	}
	// The webhook was stopped just before: the apiserver may still call it
	// from its cached configuration for a moment.
	if err := pastWebhookCalls(func() error {
		return env.Client.SubResource("binding").Create(ctx, pod, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "rb-press-standby"},
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "rb-press-standby"}, &node); err != nil {
		t.Fatal(err)
	}
	var src *corev1.PodCertificateProjection
	var bundleSrc *corev1.ClusterTrustBundleProjection
	for _, v := range pod.Spec.Volumes {
		for _, p := range projections(v) {
			if p.PodCertificate != nil {
				src = p.PodCertificate
			}
			if p.ClusterTrustBundle != nil {
				bundleSrc = p.ClusterTrustBundle
			}
		}
	}
	if src == nil || bundleSrc == nil {
		t.Fatalf("runtime pod %s projects no lease credentials: %+v", pod.Name, pod.Spec.Volumes)
	}
	req, key, err := leasetlstest.RequestPodCertificate(ctx, env.Client, pod, src, node.UID, "sa-uid")
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	creds, err := leasetlstest.AwaitPodCertificate(wait, env.Client, req, key)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := leasetlstest.ProjectedTrustBundle(ctx, env.Client, bundleSrc)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := leasetls.ParseRuntime(creds, bundle)
	if err != nil {
		t.Fatal(err)
	}
	if got := rc.Cert.Leaf.URIs; len(got) != 1 || got[0].String() != leaseapi.RuntimeIdentity(ns+"/rb-press", epoch) {
		t.Fatalf("the runtime's certificate names %v", got)
	}
	second, err := leasetlstest.MakeCA("another-lease-ca")
	if err != nil {
		t.Fatal(err)
	}
	files[leasetls.CABundleFile] = append(append([]byte{}, files[leasetls.CABundleFile]...), second.CertPEM...)
	leasetlstest.WriteAtomic(t, dir, files)
	eventually(t, "the CA bundle published again", func() bool {
		b, err := leasetlstest.ProjectedTrustBundle(ctx, env.Client, bundleSrc)
		return err == nil && strings.Count(string(b), "BEGIN CERTIFICATE") == 2
	})
}

func projections(v corev1.Volume) []corev1.VolumeProjection {
	if v.Projected == nil {
		return nil
	}
	return v.Projected.Sources
}

// renderedSecret is the data of the Secret the chart rendered as name.
func renderedSecret(t *testing.T, ms []Manifest, name string) map[string][]byte {
	t.Helper()
	for _, m := range ms {
		if m.Kind != "Secret" || m.Name != name {
			continue
		}
		out := map[string][]byte{}
		data, _ := m.Object["data"].(map[string]any)
		for k, v := range data {
			b, err := base64.StdEncoding.DecodeString(v.(string))
			if err != nil {
				t.Fatal(err)
			}
			out[k] = b
		}
		return out
	}
	t.Fatalf("the chart renders no Secret %s", name)
	return nil
}
